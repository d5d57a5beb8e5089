"""The one error `autopar ask` raises: a request that cannot be turned into one command."""

from __future__ import annotations

from autopar.errors import SpecError


class AskError(SpecError):
    """A request that cannot be turned into one command: one line naming the words at fault."""
