"""faust's codec of the records topic's values: each one as its single-object bytes
(`olstream.streams.framed_input`), decoded where faust reads the message, before the record step."""

from __future__ import annotations

from typing import Any

from faust.serializers.codecs import Codec

from olstream.streams.framed_input import single_object_or_exit


class SingleObjectValues(Codec):
    """`raw`, except that a `confluent`-framed value becomes its single-object equivalent."""

    def __init__(self, topic: str, **kwargs: Any) -> None:
        super().__init__(topic=topic, **kwargs)
        self._where = f"records topic {topic}"

    def _loads(self, s: bytes) -> Any:
        return single_object_or_exit(s, self._where)

    def _dumps(self, s: Any) -> bytes:
        return bytes(s)
