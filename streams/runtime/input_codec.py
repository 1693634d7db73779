"""faust's codec of the records topic's values: each one as its single-object bytes (the worker's
`olstream.streams.framed_input.InputFraming`), decoded where faust reads the message, before the
record step."""

from __future__ import annotations

from typing import Any

from faust.serializers.codecs import Codec

from olstream.streams.framed_input import InputFraming


class SingleObjectValues(Codec):
    """`raw`, except that a `confluent`-framed value becomes its single-object equivalent."""

    def __init__(self, topic: str, framing: InputFraming, **kwargs: Any) -> None:
        # in faust's kwargs too: a clone (`codec | other`) is built from them
        super().__init__(topic=topic, framing=framing, **kwargs)
        self._where = f"records topic {topic}"
        self._framing = framing

    def _loads(self, s: bytes) -> Any:
        return self._framing.single_object_or_exit(s, self._where)

    def _dumps(self, s: Any) -> bytes:
        return bytes(s)
