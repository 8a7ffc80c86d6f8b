"""Modules lmms-eval imports but the suite's tasks never use are imported at their first use, not at start-up
(medvision_bm.runner.harness.defer_imports)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from medvision_bm.runner.harness import defer_imports


@pytest.fixture()
def package(tmp_path, monkeypatch):
    """A real package on sys.path whose import appends to a file (so a test sees whether it ran)."""
    root = tmp_path / "site"
    pkg = root / "deferred_probe"
    (pkg / "sub").mkdir(parents=True)
    ran = tmp_path / "ran.txt"
    (pkg / "__init__.py").write_text(f"open({str(ran)!r}, 'a').write('init\\n')\nVALUE = 42\n"
                                     "def load(name):\n    return 'loaded ' + name\n")
    (pkg / "sub" / "__init__.py").write_text("from deferred_probe import VALUE\nTWICE = 2 * VALUE\n")
    monkeypatch.syspath_prepend(str(root))
    yield "deferred_probe", ran
    for name in [n for n in sys.modules if n.split(".")[0] == "deferred_probe"]:
        del sys.modules[name]


def test_a_deferred_module_runs_at_its_first_use_and_serves_its_attributes(package):
    name, ran = package
    defer_imports([name])
    import deferred_probe as stand_in  # what lmms-eval's ``import evaluate as hf_evaluate`` gets

    assert not ran.exists()
    assert inspect.getmodule(test_a_deferred_module_runs_at_its_first_use_and_serves_its_attributes) is not None
    assert stand_in.__file__.endswith("__init__.py") and not ran.exists()  # looked over, not imported
    assert stand_in.load("x") == "loaded x" and stand_in.VALUE == 42
    assert ran.read_text() == "init\n"
    assert sys.modules[name] is not stand_in and sys.modules[name].VALUE == 42  # the real module from then on
    assert stand_in.VALUE == 42 and ran.read_text() == "init\n"  # imported once


def test_a_submodule_import_imports_the_module_first(package):
    name, ran = package
    defer_imports([name])
    import deferred_probe.sub

    assert deferred_probe.sub.TWICE == 84 and ran.read_text() == "init\n"


def test_an_imported_or_missing_module_is_left_alone(package):
    name, _ = package
    import deferred_probe

    defer_imports([name, "no_such_module_anywhere"])
    assert sys.modules[name] is deferred_probe and "no_such_module_anywhere" not in sys.modules


def test_loading_lmms_eval_as_the_harness_does_leaves_hf_evaluate_unimported():
    code = ("import sys\nfrom medvision_bm.runner.harness import defer_imports\ndefer_imports()\n"
            "import lmms_eval.evaluator, lmms_eval.api.task, lmms_eval.tasks\n"
            "import medvision_bm.models.lmms_models\n"
            "print(type(sys.modules['evaluate']).__name__, 'transformers.pipelines' in sys.modules)\n"
            "import evaluate\nprint(callable(evaluate.load), type(sys.modules['evaluate']).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["_Deferred", "False", "True", "module"]
