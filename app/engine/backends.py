"""Which engine the app runs, from the backend settings: local, a remote profile, or one of them
with a fallback behind it."""

from __future__ import annotations

import logging

from app.core.settings.keystore import KeyStore, profile_entry
from app.core.settings.settings import LOCAL_PROFILE, BackendsConfig, EndpointProfile
from app.engine.base import EngineBase

log = logging.getLogger(__name__)


def remote_engine(profile: EndpointProfile, backends: BackendsConfig, keys: KeyStore) -> EngineBase:
    from app.engine.remote.remote import RemoteEngine

    return RemoteEngine(profile, keys.get(profile_entry(profile.name)),
                        first_token_timeout_s=backends.first_token_budget_s)


def local_engine() -> EngineBase:
    """vLLM in a child process: its tokenizer's long GIL holds would freeze the window (BENCHMARKS)."""
    from app.engine.process.engine_process import EngineProcess

    return EngineProcess()


def build_engine(backends: BackendsConfig, keys: KeyStore) -> EngineBase:
    """The active backend, wrapped in a FailoverEngine when a fallback is configured.

    A remote active profile falls back to the local engine when ``fallback_to_local`` is on,
    otherwise to the ``fallback`` profile if one is set.
    """
    active = backends.profile(backends.active) if backends.active != LOCAL_PROFILE else None
    if backends.active != LOCAL_PROFILE and active is None:
        log.warning("active profile %r no longer exists; using the local engine", backends.active)
    primary = remote_engine(active, backends, keys) if active else local_engine()
    fallback: EngineBase | None = None
    if active is not None and backends.fallback_to_local:
        fallback = local_engine()
    else:
        profile = backends.profile(backends.fallback)
        if profile is not None and profile is not active:
            fallback = remote_engine(profile, backends, keys)
    if fallback is None:
        return primary
    from app.engine.remote.failover import FailoverEngine

    return FailoverEngine(primary, fallback, first_token_budget_s=backends.first_token_budget_s)
