"""llama.cpp through llama-cpp-python, as the peer runners use it (they run in the peer's own
venv, .venv-llamacpp: this module imports only the standard library until called)."""

from __future__ import annotations

import time


def open_model(path: str, threads: int, extra_buffer_types: bool = True):
    """A llama_cpp.Llama on the GGUF at `path` with `threads` threads, quiet. With
    extra_buffer_types False, llama.cpp keeps every weight in its plain CPU buffer: no repacked
    (CPU_REPACK) or AMX copy. llama-cpp-python's Llama has no argument for that, so the model
    defaults it reads while loading are patched for that one call."""
    import llama_cpp.llama_cpp as lib
    from llama_cpp import Llama

    defaults = lib.llama_model_default_params
    if not extra_buffer_types:

        def plain_buffers():
            params = defaults()
            params.use_extra_bufts = False
            return params

        lib.llama_model_default_params = plain_buffers
    try:
        return Llama(
            model_path=path,
            n_threads=threads,
            n_threads_batch=threads,
            n_ctx=1024,
            n_batch=512,
            verbose=False,
        )
    finally:
        lib.llama_model_default_params = defaults


def greedy(llm, prompt: list[int], tokens: int) -> tuple[list[int], list[float]]:
    """`tokens` greedy tokens after `prompt` (EOS ignored), and the perf_counter time at which
    each arrived; the clock starts before the prompt is submitted (times[0] - that start is the
    time to the first token)."""
    out: list[int] = []
    times: list[float] = [time.perf_counter()]
    llm.reset()
    for token in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
        out.append(int(token))
        times.append(time.perf_counter())
        if len(out) == tokens:
            break
    return out, times
