"""Runs medvision_bm's vLLM backend against the real vllm package, up to the device, and reports what vLLM made of it.

Run by tests/models/test_vllm_contract.py inside the vLLM contract environment (medvision_bm.envs.vllm_contract),
with the checkout's src/ on PYTHONPATH and VLLM_TARGET_DEVICE=cpu (vLLM's own switch for CPU-side use of an
accelerator wheel, without which its argument parser cannot build its defaults). Usage:
``python vllm_contract_probe.py CASES.json OUT.json``.

What runs for real, per case: ``VLLMBackend(...)`` from medvision_bm.models.vllm_offline, which calls
``vllm.LLM.__init__`` (vLLM's own code builds ``EngineArgs`` from our keyword arguments) up to
``LLMEngine.from_engine_args``, the first step that needs the device (it builds the VllmConfig for the platform,
loads the model config from the hub and starts the engine core): there the probe stops and keeps the EngineArgs.
Each of our keyword arguments is then validated against EngineArgs' own type annotation (pydantic, strict), and
the values against vLLM's config classes that hold them (CacheConfig, ParallelConfig, SchedulerConfig,
MultiModalConfig, LoRAConfig). ``backend.generate(...)`` then runs our sampling mapping into the real
``vllm.SamplingParams`` and our request through the real ``LLM.chat`` (its argument handling, conversation,
parameter and LoRA sequencing); two engine-side steps are stood in for, because they need the checkpoint's
tokenizer and processor or the device: the chat renderer (``_preprocess_chat_one``; here each content part goes
through vLLM's own part parser instead) and the engine (``llm_engine``: requests are recorded and answered with
real ``vllm.RequestOutput`` objects). The server command line goes through vLLM's own CLI (``vllm.entrypoints.cli.
main.main``: the parser and ``validate_parsed_serve_args``) up to the subcommand that would start the server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any


class AtDevice(Exception):
    """Raised where vLLM would start touching the device; carries what it was handed."""

    def __init__(self, payload: Any) -> None:
        super().__init__("stopped before device initialisation")
        self.payload = payload


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    return repr(value)


class Probe:
    def __init__(self) -> None:
        import msgspec
        import pydantic
        import vllm
        from vllm.config import CacheConfig, LoRAConfig, MultiModalConfig, ParallelConfig, SchedulerConfig
        from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
        from vllm.entrypoints import llm as llm_module
        from vllm.outputs import CompletionOutput, RequestOutput
        from vllm.renderers.chat_utils import chat_message

        self.vllm, self.msgspec, self.pydantic = vllm, msgspec, pydantic
        self.EngineArgs, self.AsyncEngineArgs = EngineArgs, AsyncEngineArgs
        self.configs = SimpleNamespace(cache=CacheConfig, lora=LoRAConfig, mm=MultiModalConfig,
                                       parallel=ParallelConfig, scheduler=SchedulerConfig)
        self.chat_message = chat_message
        self.outputs = SimpleNamespace(request=RequestOutput, completion=CompletionOutput)
        self._engine_globals = vars(sys.modules[EngineArgs.__module__])
        self.engine_fields = {f.name: f.type for f in dataclasses.fields(EngineArgs)}

        class _EngineBoundary:
            @staticmethod
            def from_engine_args(engine_args: Any, usage_context: Any = None) -> Any:
                raise AtDevice(engine_args)

        llm_module.LLMEngine = _EngineBoundary  # what vllm.LLM.__init__ calls after building EngineArgs
        vllm.LLM = self._contract_llm_class(vllm.LLM)  # what VLLMBackend instantiates

    # ------------------------------------------------------------------------------------------ engine arguments
    def check_engine_args(self, ours: dict[str, Any], ea: Any) -> list[str]:
        """Type of each of our arguments by EngineArgs' annotation, then the values by vLLM's config classes."""
        problems = []
        adapter_config = self.pydantic.ConfigDict(arbitrary_types_allowed=True)
        for key in ours:
            if key not in self.engine_fields:
                problems.append(f"{key}: not an EngineArgs field")
                continue
            annotation = self.engine_fields[key]
            if isinstance(annotation, str):  # a string annotation, resolved in the module EngineArgs is defined in
                annotation = eval(annotation, self._engine_globals)
            try:
                self.pydantic.TypeAdapter(annotation, config=adapter_config).validate_python(getattr(ea, key),
                                                                                             strict=True)
            except self.pydantic.ValidationError as exc:
                problems.append(f"{key}={getattr(ea, key)!r}: not a {annotation} ({exc.errors()[0]['msg']})")
        c = self.configs
        checks = [
            ("CacheConfig", lambda: c.cache(gpu_memory_utilization=ea.gpu_memory_utilization,
                                            **({"block_size": ea.block_size} if ea.block_size is not None else {}))),
            ("ParallelConfig", lambda: c.parallel(tensor_parallel_size=ea.tensor_parallel_size)),
            ("SchedulerConfig", lambda: c.scheduler.default_factory(  # None: vLLM picks its own later
                **{k: v for k, v in (("max_num_seqs", ea.max_num_seqs), ("max_model_len", ea.max_model_len))
                   if v is not None})),
            ("MultiModalConfig", lambda: c.mm(limit_per_prompt=ea.limit_mm_per_prompt,
                                              mm_processor_kwargs=ea.mm_processor_kwargs)),
        ]
        if ea.enable_lora:
            checks.append(("LoRAConfig", lambda: c.lora(max_lora_rank=ea.max_lora_rank, max_loras=ea.max_loras)))
        for name, build in checks:
            try:
                build()
            except Exception as exc:  # pydantic's ValidationError or vLLM's own ValueError
                problems.append(f"{name}: {_error(exc)}")
        return problems

    # ------------------------------------------------------------------------------------------ LLM boundary
    def _contract_llm_class(self, llm_cls: type) -> type:
        probe = self

        class ContractLLM(llm_cls):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.engine_kwargs = dict(kwargs, **({"model": args[0]} if args else {}))
                try:
                    super().__init__(*args, **kwargs)
                except AtDevice as stop:
                    self.engine_args = stop.payload
                else:  # pragma: no cover - the boundary was not reached
                    raise AssertionError("vllm.LLM started an engine")
                # LLM.chat reads the runner type off the model config, which needs the checkpoint's config
                self.model_config = SimpleNamespace(runner_type="generate", hf_config=SimpleNamespace(architectures=[]))
                self.llm_engine = probe.engine_recorder()
                from vllm.utils.counter import Counter

                self.request_counter = Counter()
                self.chat_calls: list[dict[str, Any]] = []
                self.rendered: list[dict[str, Any]] = []

            def chat(self, *args: Any, **kwargs: Any) -> Any:
                import inspect

                bound = inspect.signature(llm_cls.chat).bind(self, *args, **kwargs)
                self.chat_calls.append({k: type(v).__name__ for k, v in bound.arguments.items() if k != "self"})
                return super().chat(*args, **kwargs)

            def _preprocess_chat_one(self, conversation: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
                self.rendered.append(probe.parse_conversation(conversation, kwargs))
                return {"type": "token", "prompt_token_ids": list(range(len(self.rendered) + 4))}

        return ContractLLM

    def parse_conversation(self, conversation: list[dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Each message's parts as vLLM's own content-part parser reads them (type, what it extracted)."""
        from PIL import Image

        messages = []
        for message in conversation:
            content = message.get("content")
            parts: list[dict[str, Any]] = []
            for part in ([{"type": "text", "text": content}] if isinstance(content, str) else content or []):
                ptype, value = self.chat_message.parse_chat_message_content_mm_part(part)
                entry: dict[str, Any] = {"type": ptype, "known": ptype in self.chat_message.MM_PARSER_MAP,
                                         "extra_fields": sorted(self.chat_message._collect_extra_fields(part))}
                if isinstance(value, Image.Image):
                    entry["image"] = {"mode": value.mode, "size": list(value.size)}
                elif isinstance(value, str):
                    entry["text"] = value
                else:
                    entry["value"] = type(value).__name__
                parts.append(entry)
            messages.append({"keys": sorted(message), "role": message.get("role"), "parts": parts})
        return {"messages": messages, "chat_template_kwargs": _jsonable(kwargs.get("chat_template_kwargs"))}

    def engine_recorder(self) -> Any:
        outputs = self.outputs

        class EngineRecorder:
            """Stands in for vLLM's LLMEngine (the device side): records requests, answers with real outputs."""

            vllm_config = SimpleNamespace(lora_config=None)

            def __init__(self) -> None:
                self.requests: list[dict[str, Any]] = []
                self._pending: list[tuple[str, Any]] = []

            def add_request(self, request_id: str, prompt: Any, params: Any, lora_request: Any = None,
                            priority: int = 0) -> str:
                self.requests.append({"request_id": request_id, "params": params, "lora_request": lora_request,
                                      "priority": priority})
                self._pending.append((request_id, prompt))
                return request_id

            def has_unfinished_requests(self) -> bool:
                return bool(self._pending)

            def get_num_unfinished_requests(self) -> int:
                return len(self._pending)

            def abort_request(self, request_ids: Any, internal: bool = False) -> None:
                self._pending.clear()

            def step(self) -> list[Any]:
                done = []
                reasons = ("stop", "length", "abort")
                for request_id, prompt in self._pending:
                    n = int(request_id)
                    completion = outputs.completion(index=0, text=f"<answer>{n}</answer>", token_ids=list(range(n + 2)),
                                                    cumulative_logprob=None, logprobs=None,
                                                    finish_reason=reasons[n % 3])
                    done.append(outputs.request(request_id=request_id, prompt=None,
                                                prompt_token_ids=list(prompt["prompt_token_ids"]),
                                                prompt_logprobs=None, outputs=[completion], finished=True))
                self._pending.clear()
                return done

        return EngineRecorder()

    # ------------------------------------------------------------------------------------------ one backend case
    def sampling_report(self, params: Any) -> dict[str, Any]:
        keys = ("max_tokens", "min_tokens", "temperature", "top_p", "top_k", "seed", "stop", "repetition_penalty")
        return {k: _jsonable(getattr(params, k)) for k in keys}

    def run_backend(self, case: dict[str, Any]) -> dict[str, Any]:
        from PIL import Image

        from medvision_bm.models import vllm_offline as vo
        from medvision_bm.models.base import GenRequest, GenSettings

        out: dict[str, Any] = {}
        try:
            backend = vo.VLLMBackend(*case["args"], **case["kwargs"])
        except Exception as exc:
            out["error"] = _error(exc)
            return out
        llm = backend.llm
        ea = llm.engine_args
        out["engine_args"] = {k: _jsonable(getattr(ea, k)) for k in llm.engine_kwargs}
        out["engine_problems"] = self.check_engine_args(llm.engine_kwargs, ea)
        out["engine_info"] = _jsonable(backend.engine_info())
        requests, sampling_problems = [], []
        for i, (family, gen_json) in enumerate(case["gens"].items()):
            gen = GenSettings(**{**gen_json, "stop": tuple(gen_json.get("stop") or ())})
            try:  # the types of our sampling arguments, by SamplingParams' own annotations
                self.msgspec.convert(vo.sampling_kwargs(gen), self.vllm.SamplingParams)
            except (self.msgspec.ValidationError, TypeError, ValueError) as exc:
                sampling_problems.append(f"{family}: {_error(exc)}")
            image = Image.new("RGB", (64 + 8 * i, 48), (i * 40, 90, 200))
            requests.append(GenRequest(f"{family}-0", f"{family}: measure it.", None, gen,
                                       system_prompt=case.get("system_prompt"), images=[image]))
        out["sampling_problems"] = sampling_problems
        results: list[Any] = []
        real_messages = vo.chat_messages
        if case.get("image_part"):  # a mutant: the image part under another type name
            def renamed(request: Any) -> list[dict[str, Any]]:
                kind = case["image_part"]
                return [{**m, "content": [{"type": kind, kind: p["image_pil"]} if p.get("type") == "image_pil"
                                          else p for p in m["content"]]} if isinstance(m["content"], list) else m
                        for m in real_messages(request)]

            vo.chat_messages = renamed
        try:
            backend.generate(requests, results.append)
        except Exception as exc:
            out["generate_error"] = _error(exc)
        finally:
            vo.chat_messages = real_messages
        out["results"] = [{"key": r.key, "ok": r.ok, "text": r.text, "finish_reason": r.finish_reason,
                           "error": None if r.error is None else r.error.message,
                           "input_tokens": r.usage.input_tokens if r.usage else None,
                           "output_tokens": r.usage.output_tokens if r.usage else None} for r in results]
        out["chat_calls"] = llm.chat_calls
        out["rendered"] = llm.rendered
        out["requests"] = [{"sampling": self.sampling_report(q["params"]),
                            "params_type": type(q["params"]).__name__,
                            "lora": None if q["lora_request"] is None else {
                                "type": type(q["lora_request"]).__name__, "name": q["lora_request"].lora_name,
                                "id": q["lora_request"].lora_int_id, "path": q["lora_request"].lora_path}}
                           for q in llm.llm_engine.requests]
        return out

    # ------------------------------------------------------------------------------------------ server command
    def run_serve(self, argv: list[str]) -> dict[str, Any]:
        from vllm.entrypoints.cli import main as cli_main
        from vllm.entrypoints.cli import serve as serve_module

        def at_server_start(args: Any) -> None:
            raise AtDevice(args)

        serve_module.ServeSubcommand.cmd = staticmethod(at_server_start)
        stderr = io.StringIO()
        saved = sys.argv
        sys.argv = list(argv)
        try:
            with contextlib.redirect_stderr(stderr):
                cli_main.main()
        except AtDevice as stop:
            args = stop.payload
        except SystemExit as exc:
            lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
            return {"error": f"exit {exc.code}: {lines[-1] if lines else ''}"}
        except Exception as exc:
            return {"error": _error(exc)}
        else:
            return {"error": "the serve subcommand was not reached"}
        finally:
            sys.argv = saved
        if getattr(args, "model_tag", None) is not None:  # as ServeSubcommand.cmd does first
            args.model = args.model_tag
        try:
            ea = self.AsyncEngineArgs.from_cli_args(args)
        except Exception as exc:
            return {"error": f"AsyncEngineArgs.from_cli_args: {_error(exc)}"}
        keys = ("model", "served_model_name", "tensor_parallel_size", "gpu_memory_utilization", "max_model_len",
                "dtype", "seed", "revision", "trust_remote_code", "block_size", "enforce_eager", "mm_processor_kwargs",
                "limit_mm_per_prompt")
        ours = {k: getattr(ea, k) for k in keys if k != "served_model_name" and getattr(ea, k) is not None}
        return {"engine_args": {k: _jsonable(getattr(ea, k)) for k in keys},
                "host": args.host, "port": args.port, "engine_problems": self.check_engine_args(ours, ea)}

    # ------------------------------------------------------------------------------------------ raw calls
    def run_sampling(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"sampling": self.sampling_report(self.vllm.SamplingParams(**kwargs))}
        except Exception as exc:
            return {"error": _error(exc)}


def main(argv: list[str]) -> int:
    cases = json.loads(Path(argv[1]).read_text())
    start = time.perf_counter()
    probe = Probe()
    seconds = {"import": round(time.perf_counter() - start, 1)}
    import typing

    from vllm.config import lora

    report: dict[str, Any] = {"vllm": probe.vllm.__version__, "backend": {}, "serve": {}, "sampling": {},
                              "seconds": seconds, "max_lora_ranks": list(typing.get_args(lora.MaxLoRARanks))}
    for kind, run in (("backend", probe.run_backend), ("serve", lambda c: probe.run_serve(c["argv"])),
                      ("sampling", lambda c: probe.run_sampling(c["kwargs"]))):
        t0 = time.perf_counter()
        for case in cases.get(kind, []):
            try:
                report[kind][case["id"]] = run(case)
            except Exception:
                report[kind][case["id"]] = {"error": traceback.format_exc()}
        seconds[kind] = round(time.perf_counter() - t0, 1)
    Path(argv[2]).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
