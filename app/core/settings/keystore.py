"""API keys and the local server's token, in the OS keyring. Never in the settings file or the logs.

Where the machine has no keyring backend (a headless Linux box without a Secret Service),
keys are kept in memory for this session only and ``notice`` says so. There is no
plaintext-file fallback on purpose.
"""

from __future__ import annotations

import logging
import secrets

import keyring
import keyring.backends.fail
from keyring.errors import KeyringError

from app.core.settings.redaction import remember_secret

log = logging.getLogger(__name__)

SERVICE = "nalar"
API_SERVER_TOKEN = "local-api-server-token"
NO_BACKEND_NOTICE = ("No system keyring is available (on Linux: install and unlock a Secret Service such as "
                     "GNOME Keyring or KWallet). Keys are kept in memory for this session only and must be "
                     "entered again after a restart.")


def new_token() -> str:
    return "nalar-" + secrets.token_urlsafe(32)


PROFILE_PREFIX = "profile:"


def profile_entry(profile_name: str) -> str:
    return PROFILE_PREFIX + profile_name


class KeyStore:
    """A thin wrapper over ``keyring`` that degrades to memory, never to a file."""

    def __init__(self) -> None:
        self._memory: dict[str, str] = {}
        self.notice: str | None = None
        self.profile_changes = 0  # bumped when a profile's key changes: engines built before it are stale

    @property
    def persistent(self) -> bool:
        return not isinstance(keyring.get_keyring(), keyring.backends.fail.Keyring)

    def _no_backend(self, exc: Exception | None = None) -> None:
        if self.notice is None:
            log.warning("no usable keyring backend (%s); keys stay in memory", type(exc).__name__ if exc else "none")
            self.notice = NO_BACKEND_NOTICE

    def get(self, entry: str) -> str | None:
        """The secret stored under ``entry``; from here on it is blanked out of outside text Nalar shows or logs."""
        if entry in self._memory:
            return self._memory[entry]
        if not self.persistent:
            self._no_backend()
            return None
        try:
            secret = keyring.get_password(SERVICE, entry)
        except KeyringError as exc:
            self._no_backend(exc)
            return None
        remember_secret(secret)
        return secret

    def set(self, entry: str, secret: str) -> bool:
        """Store ``secret``; True if it went to the OS keyring, False if it is kept in memory only."""
        remember_secret(secret)
        if entry.startswith(PROFILE_PREFIX):
            self.profile_changes += 1
        if self.persistent:
            try:
                keyring.set_password(SERVICE, entry, secret)
                self._memory.pop(entry, None)
                return True
            except KeyringError as exc:
                self._no_backend(exc)
        else:
            self._no_backend()
        self._memory[entry] = secret
        return False

    def delete(self, entry: str) -> None:
        if entry.startswith(PROFILE_PREFIX):
            self.profile_changes += 1
        self._memory.pop(entry, None)
        if self.persistent:
            try:
                keyring.delete_password(SERVICE, entry)
            except KeyringError:
                pass  # nothing stored under it

    def api_server_token(self) -> str:
        """The local server's bearer token, made once and kept in the keyring."""
        token = self.get(API_SERVER_TOKEN)
        if not token:
            token = new_token()
            self.set(API_SERVER_TOKEN, token)
        return token
