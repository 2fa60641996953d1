"""pluggy markers for the `zero` project; every zero-* hook uses these."""
from __future__ import annotations

import pluggy

PROJECT_NAME = "zero"
ENTRY_POINT_GROUP = "zero"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
