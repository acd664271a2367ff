"""Hub failures told apart once (app/core/models/hub_problems.py), on huggingface_hub's own exception classes."""

from __future__ import annotations

import httpx
import pytest
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

from app.core.models.hub_download import _listing_error
from app.core.models.hub_problems import first_line, hub_problem


def answered(status: int) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("GET", "http://127.0.0.1:9/api/models/acme/m/revision/main"))


@pytest.mark.parametrize(("exc", "expected"), [
    (GatedRepoError("Access to model acme/m is restricted.", response=answered(401)), "gated"),
    (HfHubHTTPError("403 Forbidden: please log in.", response=answered(403)), "gated"),
    (RepositoryNotFoundError("404 Repository Not Found for url.", response=answered(401)), "not_found"),
    (RevisionNotFoundError("404 Revision Not Found for url.", response=answered(404)), "no_revision"),
    (HfHubHTTPError("500 Server Error: oops\nRequest id: x", response=answered(500)), "http"),
    (httpx.ConnectError("[Errno 111] Connection refused"), "unreachable"),
], ids=["gated", "401-403", "missing", "revision", "server", "offline"])
def test_each_failure_has_its_kind(exc: BaseException, expected: str) -> None:
    """Bugs caught: a gated repo (a RepositoryNotFoundError subclass) called missing; a missing repo's 401 (the
    hub's answer for private or unknown repos) called gated; a server error called offline."""
    assert hub_problem(exc) == expected


def test_a_listing_refused_for_a_login_names_hf_auth_login() -> None:
    """Bug caught (the copies had drifted): a download's listing refused with 403 said 'retry later'."""
    error = _listing_error(HfHubHTTPError("403 Forbidden", response=answered(403)), "http://127.0.0.1:9", "acme/m",
                           "main")
    assert "gated or private" in str(error) and "hf auth login" in str(error)
    assert first_line(HfHubHTTPError("500 Server Error: oops\nRequest id: x", response=answered(500))) == \
        "500 Server Error: oops"
