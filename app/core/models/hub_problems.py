"""What went wrong talking to a Hugging Face hub (or a mirror that speaks its API), told apart once for the search,
a repo's facts and downloads. Each says it in its own words; which words is decided here."""

from __future__ import annotations

from typing import Literal

HubProblem = Literal["gated", "not_found", "no_revision", "http", "unreachable"]


def hub_problem(exc: BaseException) -> HubProblem:
    """The kind of a huggingface_hub failure (GatedRepoError is a RepositoryNotFoundError, so it is asked first)."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(exc, GatedRepoError):
        return "gated"
    if isinstance(exc, RevisionNotFoundError):
        return "no_revision"
    if isinstance(exc, RepositoryNotFoundError):
        return "not_found"
    if isinstance(exc, HfHubHTTPError):
        # A refusal that isn't a missing repo: the hub wants a login (a private repo, or a licence not accepted).
        return "gated" if getattr(exc.response, "status_code", 0) in (401, 403) else "http"
    return "unreachable"  # httpx's connection and timeout errors, DNS failures


def first_line(exc: BaseException) -> str:
    """The hub's own message, its first line (the rest is huggingface_hub's request details)."""
    return (str(exc).splitlines() or [type(exc).__name__])[0]
