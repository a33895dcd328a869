"""What every long-running sub-command does first."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.settings import Settings


def load_settings(command: str) -> Settings | None:
    """The settings for ``calmon COMMAND``, or None after saying on stderr why they are invalid.

    Callers exit with code 2 on None. Logging is configured at the level the settings give.
    """
    from app.log import configure_logging
    from app.settings import ConfigError, get_settings

    try:
        settings = get_settings()
    except ConfigError as exc:
        print(f"calmon {command}: invalid configuration: {exc}", file=sys.stderr)
        return None
    configure_logging(settings.log_level)
    return settings
