"""calmon-client depends on httpx only, so it holds copies of what the server decides: the
limits it checks before sending, the names it reads in the server's answers and the media type
it sends. Each copy must equal the server's own (both imported here), so that changing one
without the other fails."""

from __future__ import annotations

import re

from calmon_client._api import WINDOWS_PAGE
from calmon_client._arrow import ARROW_MEDIA_TYPE
from calmon_client._core import _ITEM_FIELD, MAX_BATCH, MODEL_PATTERN

from calmon.api.errors import field_name
from calmon.names import MODEL_NAME_MAX, MODEL_NAME_PATTERN
from calmon.services import ingest_arrow, ingest_schemas
from calmon.services.windows import results as window_results


def test_the_batch_limit_is_the_server_s() -> None:
    assert MAX_BATCH == ingest_schemas.MAX_BATCH


def test_the_model_name_pattern_is_the_server_s() -> None:
    assert MODEL_PATTERN.pattern == MODEL_NAME_PATTERN
    assert re.compile(MODEL_NAME_PATTERN).flags == MODEL_PATTERN.flags
    assert MODEL_PATTERN.fullmatch("m" * MODEL_NAME_MAX)
    assert not MODEL_PATTERN.fullmatch("m" * (MODEL_NAME_MAX + 1))


def test_the_windows_page_is_the_server_s_largest() -> None:
    assert WINDOWS_PAGE == window_results.MAX_PAGE


def test_the_arrow_media_type_is_the_server_s() -> None:
    assert ARROW_MEDIA_TYPE == ingest_arrow.ARROW_MEDIA_TYPE


def test_the_client_reads_the_item_the_server_s_422_names() -> None:
    for kind in ("predictions", "labels"):
        name = field_name(("body", kind, 12, "score"))
        match = _ITEM_FIELD.match(name)
        assert match is not None, name
        assert match.group(1) == "12"
