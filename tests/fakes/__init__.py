"""Fake provider servers and a fake clock for the API backend tests."""
