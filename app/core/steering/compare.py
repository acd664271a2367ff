"""Compare: one question answered under 2 to 4 variants at once, each reply an ordinary sibling turn.

``Variant`` says how a reply's sampling differs from the chat's (Think off, a think budget, Unlimited, a
temperature; a preset once presets exist). ``Comparison`` is the run as plain data that the dialog observes:
its turns (new tries of the question, so they are branches like Regenerate's), a ``Reply`` model per column,
each one's time, and which one the chat keeps. ``agreement`` says whether the final answers agree.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from app.core.chat.conversation import Conversation, Turn
from app.core.chat.reply import Reply
from app.core.settings.settings import MAX_THINK_BUDGET, SamplingConfig, changed

MIN_VARIANTS, MAX_VARIANTS = 2, 4
# A preset's sampling by its name; None until the presets feature provides one (then Variant.preset resolves).
PresetLookup = Callable[[str], SamplingConfig | None]


@dataclass(frozen=True)
class Variant:
    """How one column's reply differs from the chat's sampling; None leaves that field as the chat has it."""

    label: str
    thinking: bool | None = None
    think_budget: int | None = None
    temperature: float | None = None
    preset: str = ""  # a named preset's sampling (needs a PresetLookup), before the fields above

    @classmethod
    def think_off(cls) -> Variant:
        return cls("Think off", thinking=False)

    @classmethod
    def budget(cls, tokens: int) -> Variant:
        return cls(f"Budget {tokens:,}", thinking=True, think_budget=tokens)

    @classmethod
    def unlimited(cls) -> Variant:
        return cls("Unlimited", thinking=True, think_budget=MAX_THINK_BUDGET)

    @classmethod
    def at_temperature(cls, temperature: float) -> Variant:
        return cls(f"Temperature {temperature:g}", temperature=temperature)

    def sampling(self, base: SamplingConfig, presets: PresetLookup | None = None) -> SamplingConfig:
        """``base`` (the chat's sampling, its Think switch applied) with this variant's changes, validated."""
        if self.preset:
            found = presets(self.preset) if presets is not None else None
            if found is None:
                raise ValueError(f"No preset named {self.preset!r}.")
            base = found
        changes = {name: value for name, value in (("thinking", self.thinking), ("think_budget", self.think_budget),
                                                   ("temperature", self.temperature)) if value is not None}
        return changed(base, **changes) if changes else base


DEFAULT_VARIANTS = (Variant.think_off(), Variant.budget(256), Variant.unlimited())


# ---- agreement ------------------------------------------------------------------------------------

_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_NUMBER = re.compile(r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?")
_SAID_ANSWER = re.compile(r"answer(?: is|:)\s*(?:[^\w\s-]\s*)*(" + _NUMBER.pattern + ")", re.IGNORECASE)
_RESULT = re.compile(r"=\s*\$?\s*(" + _NUMBER.pattern + ")")
_MARKUP = re.compile(r"[*_`$\\]|\\\(|\\\)|\\\[|\\\]")


def normalise(answer: str) -> str:
    """The answer as compared: a \\boxed{} unwrapped, Markdown and TeX marks dropped, case and spacing folded,
    a final full stop dropped."""
    text = _BOXED.sub(r"\1", answer)
    text = _MARKUP.sub("", text).lower()
    return " ".join(text.split()).rstrip(".!。 ")


def final_number(answer: str) -> Fraction | None:
    """The answer's final number: the last in its last \\boxed{}, else the last one said to be the answer ("the
    answer is 12"), else the last result of an "=", else its last number. "x = 3.50" is 3.5, "1,000" is 1000,
    "3/4" is 0.75, and "p = 25: 80% of 25 is 20" is 25 (the check after it is not the result); None: no number."""
    boxed = _BOXED.findall(answer)
    if boxed and (numbers := _NUMBER.findall(boxed[-1])):
        return _value(numbers[-1])
    for said in (_SAID_ANSWER, _RESULT):
        if (found := said.findall(answer)) and (value := _value(found[-1])) is not None:
            return value
    numbers = _NUMBER.findall(answer)
    return _value(numbers[-1]) if numbers else None


def _value(number: str) -> Fraction | None:
    top, _, bottom = number.replace("−", "-").replace(",", "").replace(" ", "").partition("/")
    try:
        return Fraction(top) / Fraction(bottom) if bottom else Fraction(top)
    except (ValueError, ZeroDivisionError):
        return None


def _shown(number: Fraction | None) -> str:
    if number is None:
        return "none"
    if number.denominator == 1:
        return str(number.numerator)
    decimal = float(number)
    return f"{decimal:g}" if Fraction(decimal).limit_denominator(10**6) == number else str(number)


@dataclass(frozen=True)
class Agreement:
    """Whether the final answers agree: the same text once normalised, and their final numbers."""

    same_text: bool
    numbers: tuple[Fraction | None, ...]

    @property
    def numbers_agree(self) -> bool | None:
        """True or False when every answer has a final number; None when not all have one."""
        if not self.numbers or any(n is None for n in self.numbers):
            return None
        return len(set(self.numbers)) == 1

    @property
    def agree(self) -> bool:
        return self.same_text or self.numbers_agree is True

    @property
    def line(self) -> str:
        """The one line the dialog shows under the columns."""
        if self.same_text:
            return "The answers agree: the same text, once normalised."
        listed = " · ".join(_shown(n) for n in self.numbers)
        if self.numbers_agree:
            return f"The final numbers agree ({_shown(self.numbers[0])}); the wording differs."
        if any(n is not None for n in self.numbers):
            return f"The answers differ: final numbers {listed}."
        return "The answers differ (no final numbers to compare)."


def agreement(answers: Sequence[str]) -> Agreement:
    texts = [normalise(a) for a in answers]
    return Agreement(bool(texts) and all(t == texts[0] and t for t in texts),
                     tuple(final_number(a) for a in answers))


# ---- the run ---------------------------------------------------------------------------------------

@dataclass
class VariantRun:
    """One column: its variant, its turn (a new try of the question), its Reply model and its time."""

    variant: Variant
    turn: Turn
    request_id: str
    reply: Reply = field(default_factory=Reply)
    started: float = 0.0
    elapsed_s: float | None = None  # None while it runs

    @property
    def done(self) -> bool:
        return self.elapsed_s is not None


class Comparison:
    """The question at ``index`` of the shown branch, answered once per variant; each answer is a sibling turn of
    it (the question's earlier tries stay). ``keep`` shows one as the chat's branch; the others stay tries."""

    def __init__(self, conversation: Conversation, index: int, variants: Sequence[Variant],
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not MIN_VARIANTS <= len(variants) <= MAX_VARIANTS:
            raise ValueError(f"Compare runs {MIN_VARIANTS} to {MAX_VARIANTS} variants, not {len(variants)}.")
        self.conversation, self.index, self.clock = conversation, index, clock
        question = conversation.turns[index]
        self.runs: list[VariantRun] = []
        for n, variant in enumerate(variants):
            turn = Turn(user=question.user, parent=question.parent)
            conversation.tree.append(turn)
            self.runs.append(VariantRun(variant, turn, f"compare-{id(self):x}-{n}"))
        self.kept: Turn | None = None

    def start(self, run: VariantRun) -> None:
        run.started = self.clock()
        run.reply.begin(run.turn.backend)

    def run_of(self, request_id: str) -> VariantRun | None:
        return next((run for run in self.runs if run.request_id == request_id), None)

    def finish(self, run: VariantRun, reason: str, thinking: str, answer: str) -> None:
        """The run's reply ended: its turn takes the final texts (figures are set by the caller, who has them)."""
        run.elapsed_s = self.clock() - run.started
        run.turn.thinking, run.turn.answer, run.turn.finish_reason = thinking, answer, reason
        run.reply.finish(reason, thinking, answer)

    @property
    def done(self) -> bool:
        return all(run.done for run in self.runs)

    def agreement(self) -> Agreement:
        return agreement([run.turn.answer for run in self.runs])

    def keep(self, place: int) -> Turn:
        """Show the ``place``-th variant's turn as the chat's branch; every other try stays a sibling."""
        self.kept = self.runs[place].turn
        self.conversation.show(self.kept)
        return self.kept
