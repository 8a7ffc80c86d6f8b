"""Third-party models: cloning the upstream code at its pin, the import path, HealthGPT's --model_choice, and the
adapters' own logic (prompts, generation settings, decoding, token counts) around stand-ins for the upstream code.

The upstream "repository" is a real local git repository with two commits, reached through a file:// URL."""

from __future__ import annotations

import dataclasses
import importlib
import os
import random
import subprocess
import sys
import types
import uuid
from pathlib import Path

import pytest
import torch

from medvision_bm.errors import UserError
from medvision_bm.models import third_party as tp
from medvision_bm.models import third_party_code as tpc
from medvision_bm.models import third_party_shared as tps
from medvision_bm.models.base import GenSettings
from medvision_bm.models.registry import ThirdParty, get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.store.signature import answer_signature_inputs, digest
from mvtest_support import REPO

TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"


# ------------------------------------------------------------------------------------------------ fixtures


#: Modules the tests create (fake upstream packages); they leave sys.modules after each test.
FAKE_PREFIXES = ("mvfake_", "mvmeddr_", "mvinternvl_", "mvdep_", "huatuogpt_vision_cli", "healthgpt_demo_utils")


@pytest.fixture(autouse=True)
def _isolated_imports(monkeypatch):
    """Each test gets its own sys.path and PYTHONPATH; the fake packages it imported are forgotten after it."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    yield
    for name in [n for n in sys.modules if n.startswith(FAKE_PREFIXES)]:
        del sys.modules[name]


def _run_git(*args: str, cwd: Path) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.org", GIT_CONFIG_NOSYSTEM="1", HOME=str(cwd))
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@dataclasses.dataclass
class Upstream:
    path: Path
    url: str
    module: str  # a package at the repository root
    sub_module: str  # a package inside sub/
    first: str  # commit 1: VALUE = 1
    second: str  # commit 2: VALUE = 2


@pytest.fixture
def upstream(tmp_path) -> Upstream:
    """A git repository with two commits; its packages have names no other test uses."""
    tag = uuid.uuid4().hex[:10]
    repo = tmp_path / "remote" / "FakeUpstream"
    module, sub_module = f"mvfake_{tag}", f"mvfake_sub_{tag}"
    (repo / module).mkdir(parents=True)
    (repo / "sub" / sub_module).mkdir(parents=True)
    (repo / "sub" / sub_module / "__init__.py").write_text("WHERE = 'sub'\n")
    _run_git("-c", "init.defaultBranch=main", "init", "-q", cwd=repo)
    (repo / module / "__init__.py").write_text("VALUE = 1\n")
    _run_git("add", "-A", cwd=repo)
    _run_git("commit", "-q", "-m", "one", cwd=repo)
    first = _run_git("rev-parse", "HEAD", cwd=repo)
    (repo / module / "__init__.py").write_text("VALUE = 2\n")
    _run_git("commit", "-q", "-am", "two", cwd=repo)
    second = _run_git("rev-parse", "HEAD", cwd=repo)
    return Upstream(repo, repo.as_uri(), module, sub_module, first, second)


def _record(pins: tuple[ThirdParty, ...], name: str = "llava_med"):
    return dataclasses.replace(get_record(name), third_party=pins)


def _head(path: Path) -> str:
    return _run_git("rev-parse", "HEAD", cwd=path)


def _partials(root: Path) -> list[Path]:
    return list(root.glob(".*.partial")) if root.exists() else []


# ------------------------------------------------------------------------------------------------ checkout


def test_clone_is_at_the_pin_and_its_package_imports(tmp_path, upstream):
    root = tmp_path / "third_party"
    paths = tpc.prepare_third_party(_record((ThirdParty(upstream.url, upstream.first),)), str(root))
    checkout = root / "FakeUpstream"
    assert paths == [checkout]
    assert _head(checkout) == upstream.first
    assert sys.path[0] == str(checkout)
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(checkout)
    assert importlib.import_module(upstream.module).VALUE == 1  # the pinned commit's code, not the latest
    assert _partials(root) == []


def test_import_subdir_is_what_goes_on_the_path(tmp_path, upstream):
    paths = tpc.prepare_third_party(_record((ThirdParty(upstream.url, upstream.first, "sub"),)), str(tmp_path))
    assert paths == [tmp_path / "FakeUpstream" / "sub"]
    assert importlib.import_module(upstream.sub_module).WHERE == "sub"
    with pytest.raises(UserError, match="has no folder 'nope'"):
        tpc.prepare_third_party(_record((ThirdParty(upstream.url, upstream.first, "nope"),)), str(tmp_path))


def test_a_second_prepare_adds_each_path_once(tmp_path, upstream):
    record = _record((ThirdParty(upstream.url, upstream.first),))
    tpc.prepare_third_party(record, str(tmp_path))
    tpc.prepare_third_party(record, str(tmp_path))
    entry = str(tmp_path / "FakeUpstream")
    assert sys.path.count(entry) == 1
    assert os.environ["PYTHONPATH"].split(os.pathsep).count(entry) == 1


def test_a_matching_checkout_is_reused_without_the_network(tmp_path, upstream):
    root = tmp_path / "third_party"
    pin = ThirdParty(upstream.url, upstream.first)
    checkout = tpc.checkout(pin, root)
    (checkout / "local-note.txt").write_text("kept")
    upstream.path.rename(upstream.path.with_name("moved"))  # the URL no longer answers: no clone, no fetch possible
    assert tpc.checkout(pin, root) == checkout
    assert (checkout / "local-note.txt").read_text() == "kept"
    assert _head(checkout) == upstream.first
    # a new pin whose commit the checkout already holds is checked out there, still offline
    assert tpc.checkout(ThirdParty(upstream.url, upstream.second), root) == checkout
    assert _head(checkout) == upstream.second


def test_a_checkout_at_another_commit_fetches_the_new_pin(tmp_path, upstream):
    root = tmp_path / "third_party"
    checkout = tpc.checkout(ThirdParty(upstream.url, upstream.first), root)
    (upstream.path / upstream.module / "__init__.py").write_text("VALUE = 3\n")
    _run_git("commit", "-q", "-am", "three", cwd=upstream.path)
    third = _run_git("rev-parse", "HEAD", cwd=upstream.path)
    assert tpc.checkout(ThirdParty(upstream.url, third), root) == checkout
    assert _head(checkout) == third


def test_a_commit_not_in_the_repository_is_a_clear_error(tmp_path, upstream):
    root = tmp_path / "third_party"
    missing = "0123456789abcdef" * 2 + "01234567"
    with pytest.raises(UserError) as err:
        tpc.checkout(ThirdParty(upstream.url, missing), root)
    msg = str(err.value)
    assert f"commit {missing} is not in {upstream.url}" in msg and "pin is wrong" in msg
    assert "\n" not in msg
    assert not (root / "FakeUpstream").exists() and _partials(root) == []


def test_a_commit_missing_from_an_existing_checkout_names_it_and_the_fix(tmp_path, upstream):
    root = tmp_path / "third_party"
    tpc.checkout(ThirdParty(upstream.url, upstream.first), root)
    missing = "f" * 40
    with pytest.raises(UserError, match=r"is not in the checkout .*FakeUpstream.*remove the folder"):
        tpc.checkout(ThirdParty(upstream.url, missing), root)


def test_a_pin_that_is_not_a_full_hash_is_refused(tmp_path, upstream):
    with pytest.raises(UserError, match="not a full 40-character commit hash"):
        tpc.checkout(ThirdParty(upstream.url, upstream.first[:12]), tmp_path)
    assert not (tmp_path / "FakeUpstream").exists()


def test_an_unreachable_url_names_the_url_and_the_fix(tmp_path):
    url = (tmp_path / "no-such-repo").as_uri()
    commit = "a" * 40
    with pytest.raises(UserError) as err:
        tpc.checkout(ThirdParty(url, commit), tmp_path / "third_party")
    msg = str(err.value)
    assert f"cannot clone {url}" in msg
    assert "check the URL and the network" in msg
    assert f"clone it yourself into {tmp_path / 'third_party' / 'no-such-repo'} and check out commit {commit}" in msg
    assert "\n" not in msg
    assert _partials(tmp_path / "third_party") == []


def test_a_folder_that_is_not_a_checkout_is_not_overwritten(tmp_path, upstream):
    (tmp_path / "FakeUpstream").mkdir()
    (tmp_path / "FakeUpstream" / "mine.txt").write_text("x")
    with pytest.raises(UserError, match="exists but is not a git checkout"):
        tpc.checkout(ThirdParty(upstream.url, upstream.first), tmp_path)
    assert (tmp_path / "FakeUpstream" / "mine.txt").read_text() == "x"


def test_missing_dir_third_party_is_a_clear_error(upstream):
    with pytest.raises(UserError, match="pass --dir_third_party DIR"):
        tpc.prepare_third_party(_record((ThirdParty(upstream.url, upstream.first),)), None)
    assert tpc.prepare_third_party(get_record("oracle"), None) == []


def test_repo_dir_name():
    assert tpc.repo_dir_name("https://github.com/microsoft/LLaVA-Med") == "LLaVA-Med"
    assert tpc.repo_dir_name("https://github.com/OpenGVLab/InternVL.git/") == "InternVL"
    assert tpc.repo_dir_name("git@github.com:sunanhe/MedDr.git") == "MedDr"
    assert tpc.repo_dir_name("file:///tmp/x/FakeUpstream") == "FakeUpstream"


# ------------------------------------------------------------------------------------------------ run config


def _config(phantom_dir, tmp_path, record, *extra: str):
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir",
            str(tmp_path / "res"), "--skip_env_setup", "--skip_update_status", *extra]
    return build_config(build_parser(record, "test").parse_args(argv), record, argv)


def _answer_signature(cfg) -> str:
    return digest(answer_signature_inputs(
        model=cfg.signature_model(), generation=cfg.gen.to_json(), task="t", task_version="1", protocol=cfg.protocol,
        planner_version=cfg.contract.planner_version, plan_version="1.0.0", filtering=cfg.contract.filtering,
        reshape_hw=None, processed_hw_rule=cfg.processor_resize, system_prompt=cfg.system_prompt,
        model_flags=cfg.answer_flags()))


def test_model_choice_selects_weights_base_and_dtype_and_enters_the_signature(tmp_path, phantom_dir, clean_env):
    record = get_record("healthgpt")
    l14 = _config(phantom_dir, tmp_path, record)
    xl32 = _config(phantom_dir, tmp_path, record, "--model_choice", "HealthGPT-XL32")
    assert (l14.weights, xl32.weights) == ("HealthGPT-L14", "HealthGPT-XL32")
    assert l14.model_name == "HealthGPT-L14" and xl32.model_name == "HealthGPT-XL32"
    assert l14.signature_model()["weights"] != xl32.signature_model()["weights"]
    assert _answer_signature(l14) != _answer_signature(xl32)

    small, big = tp.healthgpt_spec(l14.weights), tp.healthgpt_spec(xl32.weights)
    assert (small.weights, small.hlora_file, small.base, small.arch, small.template) == (
        "lintw/HealthGPT-L14", "com_hlora_weights_phi4.bin", "microsoft/phi-4", "phi4", "phi4_instruct")
    assert (big.weights, big.hlora_file, big.base, big.arch, big.template) == (
        "lintw/HealthGPT-XL32", "com_hlora_weights_QWEN_32B.bin", "Qwen/Qwen2.5-32B-Instruct", "qwen2", "qwen_2")
    for spec in (small, big):
        assert (spec.hlora_r, spec.hlora_alpha, spec.hlora_nums, spec.vq_idx_nums) == (32, 64, 4, 8192)
        assert spec.vision_tower == "openai/clip-vit-large-patch14-336"
    # the dtype the model runs in is the one the signature records
    assert tp.healthgpt_dtype(small, l14.dtype, record.dtype) == l14.dtype == "float16"
    assert tp.healthgpt_dtype(big, xl32.dtype, record.dtype) == xl32.dtype == "float16"

    bf16 = _config(phantom_dir, tmp_path, record, "--dtype", "bfloat16")
    assert tp.healthgpt_dtype(small, bf16.dtype, record.dtype) == "bfloat16"
    assert _answer_signature(bf16) != _answer_signature(l14)


def test_every_healthgpt_choice_is_a_registry_choice_with_the_record_dtype():
    record = get_record("healthgpt")
    flag = next(f for f in record.flags if f.name == "--model_choice")
    assert set(flag.choices) == set(tp.HEALTHGPT_CHOICES)
    assert {s.dtype for s in tp.HEALTHGPT_CHOICES.values()} == {record.dtype}
    with pytest.raises(UserError, match="choose HealthGPT-L14 or HealthGPT-XL32"):
        tp.healthgpt_spec("HealthGPT-M3")


def test_build_clones_then_needs_a_gpu(tmp_path, phantom_dir, clean_env, upstream, monkeypatch):
    record = _record((ThirdParty(upstream.url, upstream.first),))
    cfg = _config(phantom_dir, tmp_path, record, "--dir_third_party", str(tmp_path / "tp"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(UserError, match=r"runs on a CUDA GPU only and none is visible \(CUDA_VISIBLE_DEVICES=''\)"):
        tp.build_third_party_backend(cfg)
    assert _head(tmp_path / "tp" / "FakeUpstream") == upstream.first


def test_build_says_which_environment_to_build_when_upstream_does_not_import(tmp_path, phantom_dir, clean_env,
                                                                             upstream, monkeypatch):
    record = _record((ThirdParty(upstream.url, upstream.first),))
    cfg = _config(phantom_dir, tmp_path, record, "--dir_third_party", str(tmp_path / "tp"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "llava", None)  # the fake upstream has no llava package either
    with pytest.raises(UserError, match=r"LLaVA-Med's upstream code or its dependencies do not import .*"
                                        r"`medvision-bm envs build --env eval-llavamed`"):
        tp.build_third_party_backend(cfg)


def test_build_refuses_flags_the_upstream_code_cannot_honour_before_cloning(tmp_path, phantom_dir, clean_env,
                                                                            upstream):
    pins = (ThirdParty(upstream.url, upstream.first),)
    clone_to = ("--dir_third_party", str(tmp_path / "tp"))
    llava_med, huatuo = _record(pins), _record(pins, "huatuogpt_vision")
    with pytest.raises(UserError, match="pass --dir_third_party DIR"):
        tp.build_third_party_backend(_config(phantom_dir, tmp_path, llava_med))
    adapter = tmp_path / "adapter"  # a real adapter folder: the run's path check passes, the backend refuses
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    refused = {
        "takes no --lora_path": (llava_med, "--lora_path", str(adapter)),
        "LLaVA-Med's upstream loader takes no --revision": (llava_med, "--revision", "v1"),
        "bfloat16 only": (huatuo, "--dtype", "float16"),
        "needs 'huatuogpt' in the weights path": (huatuo, "--model_hf_id", "someorg/vision-34b"),
    }
    for message, (record, *flags) in refused.items():
        with pytest.raises(UserError, match=message):
            tp.build_third_party_backend(_config(phantom_dir, tmp_path, record, *flags, *clone_to))
    assert not (tmp_path / "tp").exists()


def test_two_processes_cloning_at_once_share_one_checkout(tmp_path, upstream):
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path / "third_party"
    pin = ThirdParty(upstream.url, upstream.first)
    with ThreadPoolExecutor(4) as pool:
        paths = list(pool.map(lambda _: tpc.checkout(pin, root), range(4)))
    assert paths == [root / "FakeUpstream"] * 4
    assert _head(root / "FakeUpstream") == upstream.first
    assert _partials(root) == [] and sorted(p.name for p in root.iterdir()) == ["FakeUpstream"]


# ------------------------------------------------------------------------------------------------ shared helpers


class FakeConversation:
    """Renders like upstream's MPT-style Conversation (system + sep, then role + message + sep per turn)."""

    def __init__(self, system: str, roles: tuple[str, str], sep: str) -> None:
        self.system, self.roles, self.sep = system, roles, sep
        self.messages: list[tuple[str, str | None]] = []

    def copy(self) -> FakeConversation:
        return FakeConversation(self.system, self.roles, self.sep)

    def append_message(self, role: str, message: str | None) -> None:
        self.messages.append((role, message))

    def get_prompt(self) -> str:
        out = self.system + self.sep
        for role, message in self.messages:
            out += role + message + self.sep if message else role
        return out


PHI4 = FakeConversation("<|im_start|>system<|im_sep|>\nYou are a medieval knight.",
                        ("\n<|im_start|>user<|im_sep|>\n", "\n<|im_start|>assistant<|im_sep|>\n"), "<|im_end|>")


def test_system_prompt_replaces_the_template_text_but_keeps_its_header():
    assert tps.system_for_template(PHI4.system, "Be exact.") == "<|im_start|>system<|im_sep|>\nBe exact."
    assert tps.system_for_template("<|im_start|>system\nYou are Qwen.", "Be exact.") == "<|im_start|>system\nBe exact."
    assert tps.system_for_template("", "Be exact.") == "Be exact."  # mistral_instruct: LLAMA_2 wraps it in <<SYS>>
    assert tps.system_for_template("A chat between a user\nand an assistant.", "Be exact.") == "Be exact."


def test_llava_conversation_prompt_puts_the_image_token_before_the_question():
    prompt = tp.llava_conversation_prompt({"phi4_instruct": PHI4}, "phi4_instruct", "How long?", "<image>")
    assert prompt == ("<|im_start|>system<|im_sep|>\nYou are a medieval knight.<|im_end|>"
                      "\n<|im_start|>user<|im_sep|>\n<image>\nHow long?<|im_end|>\n<|im_start|>assistant<|im_sep|>\n")
    with_system = tp.llava_conversation_prompt({"phi4_instruct": PHI4}, "phi4_instruct", "How long?", "<image>",
                                               "Answer in mm.")
    assert with_system.startswith("<|im_start|>system<|im_sep|>\nAnswer in mm.<|im_end|>")
    assert PHI4.messages == [] and "knight" in PHI4.system  # the shared template is copied, never changed
    with pytest.raises(UserError, match=r"no conversation template 'qwen_2' \(it has: phi4_instruct\)"):
        tp.llava_conversation_prompt({"phi4_instruct": PHI4}, "qwen_2", "q", "<image>")


def test_generate_kwargs_greedy_and_sampling():
    greedy = tp.upstream_generate_kwargs(GenSettings(max_new_tokens=64, temperature=0.0, top_p=0.9))
    assert greedy == {"max_new_tokens": 64, "do_sample": False, "num_beams": 1}
    sampled = tp.upstream_generate_kwargs(GenSettings(max_new_tokens=64, temperature=0.7, top_k=20,
                                                      repetition_penalty=1.1))
    assert sampled == {"max_new_tokens": 64, "do_sample": True, "num_beams": 1, "temperature": 0.7, "top_p": None,
                       "top_k": 20, "repetition_penalty": 1.1}
    assert tp.upstream_generate_kwargs(GenSettings(), min_new_tokens=16)["min_new_tokens"] == 16
    assert tp.upstream_generate_kwargs(GenSettings(min_new_tokens=3), min_new_tokens=16)["min_new_tokens"] == 3


def test_huatuo_generation_settings_replace_the_upstream_budget_and_sampling():
    upstream = {"do_sample": True, "max_new_tokens": 512, "min_new_tokens": 1, "temperature": 0.2,
                "repetition_penalty": 1.2, "eos_token_id": 2, "pad_token_id": 2}
    greedy = tp.huatuo_gen_kwargs(upstream, GenSettings(max_new_tokens=4096, temperature=0.0))
    assert greedy == {"do_sample": False, "max_new_tokens": 4096, "num_beams": 1, "min_new_tokens": 1,
                      "repetition_penalty": 1.2, "eos_token_id": 2, "pad_token_id": 2}
    own = tp.huatuo_gen_kwargs(upstream, GenSettings(temperature=0.5, repetition_penalty=1.0, min_new_tokens=4))
    assert (own["do_sample"], own["temperature"], own["repetition_penalty"], own["min_new_tokens"]) == (
        True, 0.5, 1.0, 4)
    assert upstream["max_new_tokens"] == 512  # the chatbot's own dict is left as it was


def test_llava_med_model_name_takes_the_llava_mistral_loader_path():
    assert tp.llava_med_model_name("llava-med-v1.5-mistral-7b") == "llava-med-v1.5-mistral-7b"
    renamed = tp.llava_med_model_name("my-finetune")
    assert "llava" in renamed and "mistral" in renamed and renamed.endswith("my-finetune")


def test_huatuo_weights_must_name_the_model():
    assert tp.check_huatuo_weights("FreedomIntelligence/HuatuoGPT-Vision-34B")
    with pytest.raises(UserError, match="needs 'huatuogpt' in the weights path"):
        tp.check_huatuo_weights("/models/vision-34b")


def test_healthgpt_source_root_in_both_layouts(tmp_path):
    flat, nested = tmp_path / "flat", tmp_path / "nested"
    for root in (flat, nested / "HealthGPT"):
        (root / "llava" / "demo").mkdir(parents=True)
        (root / "llava" / "demo" / "utils.py").write_text("")
    assert tp.healthgpt_source_root(flat) == flat  # the pinned commit's layout
    assert tp.healthgpt_source_root(nested) == nested / "HealthGPT"  # later upstream layout
    with pytest.raises(UserError, match="not the HealthGPT code"):
        tp.healthgpt_source_root(tmp_path)


def _write_package(root: Path, dotted: str, body: str) -> None:
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        pkg = root.joinpath(*parts[:i])
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").touch()
    root.joinpath(*parts[:-1], parts[-1] + ".py").write_text(body)


def test_meddr_transform_comes_from_meddr_then_internvl(tmp_path, monkeypatch):
    tag = uuid.uuid4().hex[:8]
    meddr, internvl = f"mvmeddr_{tag}.dataset.transforms", f"mvinternvl_{tag}.train.dataset"
    monkeypatch.setattr(tp, "MEDDR_TRANSFORM_MODULES", (meddr, internvl))
    sys.path.insert(0, str(tmp_path))
    _write_package(tmp_path, internvl, "def build_transform(is_train, input_size, pad2square=False):\n"
                                       "    return ('internvl', input_size)\n")
    assert tp.meddr_build_transform()(is_train=False, input_size=448) == ("internvl", 448)  # MedDr's is absent

    _write_package(tmp_path, meddr, "def build_transform(is_train, input_size, pad2square=False):\n"
                                    "    return ('meddr', input_size)\n")
    importlib.invalidate_caches()
    assert tp.meddr_build_transform()(is_train=False, input_size=448) == ("meddr", 448)


def test_meddr_transform_does_not_hide_a_missing_dependency(tmp_path, monkeypatch):
    tag = uuid.uuid4().hex[:8]
    meddr = f"mvmeddr_{tag}.dataset.transforms"
    monkeypatch.setattr(tp, "MEDDR_TRANSFORM_MODULES", (meddr, f"mvinternvl_{tag}.train.dataset"))
    sys.path.insert(0, str(tmp_path))
    _write_package(tmp_path, meddr, f"import mvdep_missing_{tag}\n")
    with pytest.raises(ModuleNotFoundError, match=f"mvdep_missing_{tag}"):
        tp.meddr_build_transform()


def test_forward_gets_only_the_inputs_it_declares():
    class Old:  # a forward written for transformers 4.37, without **kwargs
        def forward(self, input_ids=None, images=None, past_key_values=None):
            return None

        def prepare_inputs_for_generation(self, input_ids, **kwargs):
            return {"input_ids": input_ids, "cache_position": 7, "images": kwargs.get("images")}

    class New:
        def forward(self, input_ids=None, **kwargs):
            return None

        def prepare_inputs_for_generation(self, input_ids, **kwargs):
            return {"input_ids": input_ids, "cache_position": 7}

    old, new = Old(), New()
    tp.accept_only_forward_kwargs(old)
    tp.accept_only_forward_kwargs(new)
    assert old.prepare_inputs_for_generation([1], images="img") == {"input_ids": [1], "images": "img"}
    assert new.prepare_inputs_for_generation([1]) == {"input_ids": [1], "cache_position": 7}


def test_counting_generate_records_lengths_and_restores_the_model():
    class Model:
        def generate(self, input_ids=None, **kwargs):
            return torch.zeros((1, 5), dtype=torch.long)

    model = Model()
    with tp.counting_generate(model) as counts:
        model.generate(input_ids=torch.zeros((1, 11), dtype=torch.long))
    assert counts == {"in": 11, "out": 5}
    assert "generate" not in vars(model)


def test_python_random_is_seeded_inside_and_restored_after():
    random.seed(123)
    expected_next = random.Random(123).random()
    with tp.python_random(0):
        inside = random.randint(0, 10**9)
    with tp.python_random(0):
        assert random.randint(0, 10**9) == inside
    assert random.random() == expected_next


# ------------------------------------------------------------------------------------------------ adapters


class WordTokenizer:
    """Token ids <-> words w<id>; id 2 is the end-of-sequence token."""

    eos_token_id = 2

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(f"w{int(i)}" for i in ids if not (skip_special_tokens and int(i) == self.eos_token_id))

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(r, skip_special_tokens) for r in rows]


def _llava_modules(monkeypatch, templates: dict, calls: dict) -> None:
    """Stand-ins for the upstream ``llava`` package: constants, conversation templates, mm_utils."""
    def tokenizer_image_token(prompt, tokenizer, image_token_index, return_tensors=None):
        calls["prompt"] = prompt
        ids = [1, *range(10, 10 + len(prompt.split()))]
        ids[1] = image_token_index
        return torch.tensor(ids)

    def process_images(images, image_processor, model_cfg):
        calls["pad_offset"] = random.randint(0, 10**6)  # upstream's expand2square draws its paste offset
        return torch.ones((len(images), 3, 4, 4))

    pkg = types.ModuleType("llava")
    constants = types.SimpleNamespace(IMAGE_TOKEN_INDEX=-200, DEFAULT_IMAGE_TOKEN="<image>",
                                      DEFAULT_IM_START_TOKEN="<im_start>", DEFAULT_IM_END_TOKEN="<im_end>")
    modules = {"llava": pkg, "llava.constants": constants,
               "llava.conversation": types.SimpleNamespace(conv_templates=templates),
               "llava.mm_utils": types.SimpleNamespace(tokenizer_image_token=tokenizer_image_token,
                                                       process_images=process_images)}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    pkg.constants, pkg.conversation, pkg.mm_utils = (modules[f"llava.{n}"] for n in ("constants", "conversation",
                                                                                     "mm_utils"))


class LlavaStyleModel:
    """Generates from inputs_embeds like the upstream LLaVA models: the output holds only the new tokens, and the
    stopping criteria see only those (as transformers' generate does when it starts from inputs_embeds)."""

    def __init__(self, new_tokens: list[int], start_end: bool = False) -> None:
        self.new_tokens = new_tokens
        self.config = types.SimpleNamespace(mm_use_im_start_end=start_end, image_aspect_ratio="pad")
        self.device = torch.device("cpu")
        self.calls: list[dict] = []

    def generate(self, inputs=None, images=None, **kwargs):
        self.calls.append({"inputs": inputs, "images": images, **kwargs})
        out = torch.tensor([self.new_tokens])
        for n in range(1, out.shape[1] + 1):
            if any(bool(c(out[:, :n], None).all()) for c in kwargs.get("stopping_criteria") or ()):
                return out[:, :n]
        return out


MISTRAL = FakeConversation("", ("[INST] ", " [/INST]"), "")


def test_llava_med_prompt_generation_and_decoding(monkeypatch, make_requests):
    calls: dict = {}
    _llava_modules(monkeypatch, {"mistral_instruct": MISTRAL}, calls)
    long_answer = list(range(100, 140))  # longer than the prompt: every token is the answer
    model = LlavaStyleModel(long_answer)
    adapter = tp.LlavaMedAdapter(WordTokenizer(), model, object(), conv_mode="mistral_instruct",
                                 dtype=torch.bfloat16, device=torch.device("cpu"))
    backend = tp.ThirdPartyBackend("llava_med", adapter)
    request = make_requests(1, gen=GenSettings(max_new_tokens=64, temperature=0.0))[0]
    request.prompt = "Measure the liver."

    result = backend.answer(request)

    assert calls["prompt"] == "[INST] <image>\nMeasure the liver. [/INST]"
    call = model.calls[0]
    assert call["images"].dtype == torch.bfloat16 and call["images"].shape == (1, 3, 4, 4)
    assert (call["do_sample"], call["max_new_tokens"], call["min_new_tokens"]) == (False, 64, 16)
    assert "temperature" not in call and call["use_cache"] is True
    assert result.text == " ".join(f"w{i}" for i in long_answer)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (len(calls["prompt"].split()) + 1, 40)
    assert result.finish_reason == "stop"

    first_offset = calls["pad_offset"]
    backend.answer(request)
    assert calls["pad_offset"] == first_offset  # the pad-to-square offset no longer varies between runs


def test_llava_med_image_start_end_tokens_system_prompt_and_stops(monkeypatch, make_requests):
    calls: dict = {}
    _llava_modules(monkeypatch, {"mistral_instruct": MISTRAL}, calls)
    model = LlavaStyleModel(list(range(100, 108)), start_end=True)
    adapter = tp.LlavaMedAdapter(WordTokenizer(), model, object(), conv_mode="mistral_instruct",
                                 dtype=torch.float16, device=torch.device("cpu"))
    request = make_requests(1, gen=GenSettings(max_new_tokens=8, temperature=0.0, stop=("w104",)),
                            system_prompt="Be exact.")[0]
    request.prompt = "Q?"
    result = tp.ThirdPartyBackend("llava_med", adapter).answer(request)
    assert calls["prompt"] == "Be exact.[INST] <im_start><image><im_end>\nQ? [/INST]"
    assert result.usage.output_tokens == 5  # the stop string ended generation at its token
    assert result.text == "w100 w101 w102 w103 "  # and is cut from the answer
    assert result.finish_reason == "stop"


def test_answer_that_fills_the_budget_is_reported_as_cut(monkeypatch, make_requests):
    _llava_modules(monkeypatch, {"mistral_instruct": MISTRAL}, {})
    model = LlavaStyleModel(list(range(100, 108)))
    adapter = tp.LlavaMedAdapter(WordTokenizer(), model, object(), conv_mode="mistral_instruct",
                                 dtype=torch.float16, device=torch.device("cpu"))
    request = make_requests(1, gen=GenSettings(max_new_tokens=8, temperature=0.0))[0]
    assert tp.ThirdPartyBackend("llava_med", adapter).answer(request).finish_reason == "length"


def test_one_image_per_question(make_requests):
    request = make_requests(1)[0]
    request.images = request.images * 2
    results = []
    tp.ThirdPartyBackend("meddr", adapter=None).generate([request], results.append)
    assert results[0].error.kind == "backend" and "exactly one image" in results[0].error.message


class FakeHuatuoChatbot:
    """Behaves like upstream cli.HuatuoChatbot.inference: reads self.gen_kwargs, generates, returns a list."""

    def __init__(self) -> None:
        self.gen_kwargs = {"do_sample": True, "max_new_tokens": 512, "min_new_tokens": 1, "temperature": 0.2,
                           "repetition_penalty": 1.2, "eos_token_id": 2, "pad_token_id": 2}
        self.tokenizer = WordTokenizer()
        self.model = LlavaStyleModel([7, 8, 9, 2])
        self.seen: list[tuple[str, list]] = []

    def inference(self, text, images=None):
        self.seen.append((text, images))
        ids = torch.tensor([[1] + [5] * len(text.split())])
        out = self.model.generate(ids, images=torch.zeros((len(images), 3, 4, 4)), use_cache=True,
                                  **self.gen_kwargs)
        return [self.tokenizer.decode(o) for o in out]


def test_huatuo_answer_per_request_settings_and_counts(make_requests):
    bot = FakeHuatuoChatbot()
    adapter = tp.HuatuoAdapter(bot)
    request = make_requests(1, gen=GenSettings(max_new_tokens=4096, temperature=0.0), system_prompt="Be exact.")[0]
    request.prompt = "How big?"
    result = tp.ThirdPartyBackend("huatuogpt_vision", adapter).answer(request)
    text, images = bot.seen[0]
    assert text == "Be exact.\n\nHow big?" and images == [request.images[0]]
    call = bot.model.calls[0]
    assert (call["do_sample"], call["max_new_tokens"], call["repetition_penalty"]) == (False, 4096, 1.2)
    assert "temperature" not in call
    assert result.text == "w7 w8 w9"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (5, 4)
    assert "generate" not in vars(bot.model)
    assert adapter.upstream_gen_kwargs["max_new_tokens"] == 512


class FakeInternVLChat:
    """Behaves like MedDr's InternVLChatModel.chat: builds ids, calls self.generate(**generation_config), decodes."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def generate(self, pixel_values=None, input_ids=None, attention_mask=None, **kwargs):
        self.calls.append({"pixel_values": pixel_values, **kwargs})
        return torch.tensor([[40, 41, 42]])

    def chat(self, tokenizer, pixel_values, question, generation_config, print_out=True):
        self.question = question
        ids = torch.ones((1, 300), dtype=torch.long)
        out = self.generate(pixel_values=pixel_values, input_ids=ids, attention_mask=ids, **generation_config)
        return tokenizer.batch_decode(out, skip_special_tokens=True)[0] + "\n"


def test_meddr_answer(make_requests):
    model = FakeInternVLChat()
    transform = lambda image: torch.zeros((3, 448, 448))  # noqa: E731 - build_transform returns a callable
    adapter = tp.MedDrAdapter(WordTokenizer(), model, transform, dtype=torch.bfloat16, device="cpu")
    request = make_requests(1, gen=GenSettings(max_new_tokens=3, temperature=0.0))[0]
    result = tp.ThirdPartyBackend("meddr", adapter).answer(request)
    call = model.calls[0]
    assert call["pixel_values"].shape == (1, 3, 448, 448) and call["pixel_values"].dtype == torch.bfloat16
    assert (call["do_sample"], call["max_new_tokens"], call["num_beams"]) == (False, 3, 1)
    assert model.question == request.prompt
    assert result.text == "w40 w41 w42"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (300, 3)
    assert result.finish_reason == "length"


class FakeProcessor:
    image_mean = (0.5, 0.25, 0.0)

    def __init__(self) -> None:
        self.seen = None

    def preprocess(self, image, return_tensors="pt"):
        self.seen = image
        return {"pixel_values": torch.ones((1, 3, 6, 6))}


def test_healthgpt_answer(monkeypatch, make_requests):
    calls: dict = {}
    _llava_modules(monkeypatch, {"phi4_instruct": PHI4}, calls)
    processor = FakeProcessor()
    llm = LlavaStyleModel([60, 61, 2])
    model = types.SimpleNamespace(get_vision_tower=lambda: types.SimpleNamespace(image_processor=processor),
                                  base_model=types.SimpleNamespace(model=llm))
    padded: list = []

    def expand2square(image, background):
        padded.append(background)
        return image.resize((max(image.size),) * 2)

    adapter = tp.HealthGPTAdapter(WordTokenizer(), model, tp.HEALTHGPT_CHOICES["HealthGPT-L14"], dtype=torch.float16,
                                  expand2square=expand2square, device="cpu")
    request = make_requests(1, gen=GenSettings(max_new_tokens=32, temperature=0.0))[0]
    request.prompt = "Size?"
    result = tp.ThirdPartyBackend("healthgpt", adapter).answer(request)
    assert calls["prompt"] == ("<|im_start|>system<|im_sep|>\nYou are a medieval knight.<|im_end|>"
                               "\n<|im_start|>user<|im_sep|>\n<image>\nSize?<|im_end|>\n<|im_start|>assistant<|im_sep|>\n")
    assert padded == [(127, 63, 0)]  # the processor's mean colour, as upstream pads
    side = max(request.images[0].size)
    call = llm.calls[0]
    assert call["image_sizes"] == (side, side) and processor.seen.size == (side, side)
    assert call["images"].dtype == torch.float16 and (call["do_sample"], call["max_new_tokens"]) == (False, 32)
    assert result.text == "w60 w61"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (len(calls["prompt"].split()) + 1, 3)
