"""The LLM-judge re-parse of stored answers (upstream's ``script/llm-parsing``): prompt, reply decoding, span
verification, the strict-first decision and the run over stores."""
