"""ServerContinuation: going on from a given text on a vLLM server (pause–edit–resume, Continue, a loop cut).

A chat-completions request can't do it: the server renders the prompt and the model starts a new reply. A
vLLM server also has ``/tokenize``, which renders a conversation with the model's own chat template, and
``/v1/completions``, which takes token ids. So the rendered prompt, the opened think block and the kept
text go in as ids, and the model writes on from exactly there, as on the local engine; vLLM's prefix cache
holds what the paused request had computed. ``probe`` finds out at connect time; a server without them
(or a model whose thinking is not plain ``<think>`` text) answers anew, and says why.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.core.models.model_families import ModelFamily, model_family
from app.core.settings.settings import SamplingConfig
from app.engine.base import Message
from app.engine.reply.harmony import REASONING_PARSER as HARMONY_REASONING
from app.engine.reply.reasoning import THINK_CLOSE, THINK_OPEN, ThinkStart, think_start_of_prompt
from app.engine.reply.tool_calls import without_reasoning
from app.engine.requests import Resume, Tools

log = logging.getLogger(__name__)

NO_TOKENIZE = ("Pause needs a server that can go on from a given thinking: {url} has no vLLM /tokenize and "
               "/v1/completions, so an edited thinking can't be resumed there. Use a vLLM server or the local "
               "engine.")
CONTROL_TOKENS = ("Pause on a remote profile writes the thinking back as text, and “{model}” marks its thinking "
                  "with its own control tokens, which text can't spell. Use the local engine to pause it.")


def server_root(base_url: str) -> str:
    """The server's root, where vLLM serves /tokenize: the base URL less its trailing /v1."""
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def family_refusal(family: ModelFamily, model: str) -> str:
    """Why this model's thinking can't be written back as text, or "" where it can (plain ``<think>`` tags)."""
    if family.own_think_tokens is not None or family.parser == HARMONY_REASONING:
        return CONTROL_TOKENS.format(model=model)
    return ""


def continuation_text(resume: Resume, prompt_opened: bool, thinking_on: bool) -> tuple[str, ThinkStart]:
    """The text after the rendered prompt, and where the model then is: in its thinking, or in its answer.

    The think block is opened here unless the template's generation prompt already did (Qwen3 thinking,
    the R1 distills); a reply resumed in its answer gets the thinking closed, as the model closed it."""
    opened = "" if prompt_opened or not thinking_on else THINK_OPEN + "\n"
    thinking = opened + resume.thinking if thinking_on else ""
    if resume.phase == "thinking" and thinking_on:
        return thinking, "open"
    closed = f"{thinking}\n{THINK_CLOSE}\n\n" if thinking_on and resume.thinking else ""
    return closed + resume.answer, "closed"


@dataclass(frozen=True)
class ContinuationPrompt:
    ids: list[int]
    start: ThinkStart  # where the model is after the ids: "open" (thinking) or "closed" (answer)
    kept_tokens: int  # the kept text's tokens, which the reply's budgets already spent


class ServerContinuation:
    """One server's /tokenize and /detokenize for one model; /v1/completions goes through the openai client."""

    def __init__(self, http: httpx.AsyncClient, model: str) -> None:
        self._http = http
        self.model = model

    @classmethod
    async def probe(cls, base_url: str, model: str, api_key: str, timeout: float) -> ServerContinuation | None:
        """The server's continuation, if it answers /tokenize as vLLM does; None otherwise (and the client is
        closed). vLLM doesn't guard /tokenize with its key, but a proxy in front may, so the key goes too."""
        http = httpx.AsyncClient(base_url=server_root(base_url), timeout=httpx.Timeout(None, connect=timeout),
                                 headers={"Authorization": f"Bearer {api_key}"})
        try:
            answer = await http.post("/tokenize", json={"model": model, "prompt": "ok"}, timeout=timeout)
            body = answer.json() if answer.status_code == 200 else {}
            if isinstance(body, dict) and isinstance(body.get("tokens"), list) and "max_model_len" in body:
                return cls(http, model)
        except (httpx.HTTPError, ValueError) as exc:
            log.info("no vLLM /tokenize at %s (%s): pause answers anew there", server_root(base_url),
                     type(exc).__name__)
        await http.aclose()
        return None

    async def close(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self._http.post(path, json=body)
        answer.raise_for_status()
        result = answer.json()
        if not isinstance(result, dict):
            raise httpx.DecodingError(f"{path} answered {type(result).__name__}, not an object")
        return result

    async def tokens(self, text: str) -> list[int]:
        if not text:
            return []
        body = await self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        return [int(token) for token in body["tokens"]]

    async def prompt(self, messages: Sequence[Message], sampling: SamplingConfig, resume: Resume,
                     thinking_on: bool, tools: Tools | None) -> ContinuationPrompt:
        """The ids to send: the conversation as the server's chat template renders it (with the generation
        prompt, the Think switch and the tools, as its chat endpoint would), then the continuation."""
        request: dict[str, Any] = {"model": self.model, "messages": without_reasoning(messages),
                                   "add_generation_prompt": True}
        if model_family(self.model).thinking == "hybrid":
            request["chat_template_kwargs"] = {"enable_thinking": sampling.thinking}
        if tools:
            request["tools"] = list(tools)
        prompt_ids = [int(token) for token in (await self._post("/tokenize", request))["tokens"]]
        tail = (await self._post("/detokenize", {"model": self.model, "tokens": prompt_ids[-8:]}))["prompt"]
        text, start = continuation_text(resume, think_start_of_prompt(str(tail)) == "open", thinking_on)
        kept = await self.tokens(text)
        return ContinuationPrompt(prompt_ids + kept, start, len(kept))
