"""Split models: the parts of ``NAME-00001-of-00003.gguf`` ... put in order and checked to belong together."""

from __future__ import annotations

import re

from pyengine.errors import GGUFError
from pyengine.gguf.header import GGUFPart

KEY_SPLIT_NO = "split.no"
KEY_SPLIT_COUNT = "split.count"
KEY_SPLIT_TENSORS_COUNT = "split.tensors.count"
SPLIT_NAME = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def split_int(part: GGUFPart, key: str) -> int | None:
    value = part.metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise GGUFError(f"{part.source.name}: byte {part.key_offsets[key]}: key {key!r}: "
                        f"must be an integer, not {part.value_types[key]}")
    return value


def order_split(parts: list[GGUFPart]) -> list[GGUFPart]:
    """Parts in ``split.no`` order, checked against ``split.count`` and each other."""
    names = ", ".join(p.source.name for p in parts)
    nos = {}
    for p in parts:
        no, count = split_int(p, KEY_SPLIT_NO), split_int(p, KEY_SPLIT_COUNT)
        if no is None or count is None:
            if len(parts) == 1:
                return parts
            raise GGUFError(f"{p.source.name}: not part of a split model (no {KEY_SPLIT_NO!r} / "
                            f"{KEY_SPLIT_COUNT!r} keys), but it was given with other files: {names}")
        if no in nos:
            raise GGUFError(f"{p.source.name}: duplicate part: split.no {no} is also "
                            f"{nos[no].source.name}")
        nos[no] = p
    first = nos.get(0) or parts[0]
    count = split_int(first, KEY_SPLIT_COUNT)
    _check_foreign(first, parts)
    if count == 1 and len(parts) == 1:
        return parts
    extra = [p for no, p in nos.items() if not 0 <= no < count]
    if extra:
        raise GGUFError(f"{extra[0].source.name}: split.no {split_int(extra[0], KEY_SPLIT_NO)} "
                        f"is outside 0..{count - 1} of split.count {count}")
    if len(nos) < count:  # name at most 5 missing parts: count may be 65535
        missing = [i for i in range(min(count, len(nos) + 5)) if i not in nos]
        raise GGUFError(f"{first.source.name}: split model of {count} parts is missing "
                        f"{_describe_missing(first, missing, count)}"
                        f"{' ...' if count - len(nos) > len(missing) else ''} (given: {names})")
    return [nos[i] for i in range(count)]


def _check_foreign(first: GGUFPart, parts: list[GGUFPart]) -> None:
    """Every part must agree with ``first`` on split.count, split.tensors.count and name prefix."""
    m0 = SPLIT_NAME.match(first.source.name)
    for p in parts:
        for key in (KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS_COUNT):
            if split_int(p, key) != split_int(first, key):
                raise GGUFError(f"{p.source.name}: foreign part: {key} is {split_int(p, key)}, "
                                f"but {split_int(first, key)} in {first.source.name}")
        m = SPLIT_NAME.match(p.source.name)
        if m0 and m and m["prefix"] != m0["prefix"]:
            raise GGUFError(f"{p.source.name}: foreign part: its name does not start with "
                            f"{m0['prefix']!r} like {first.source.name}")


def _describe_missing(first: GGUFPart, missing: list[int], count: int) -> str:
    m = SPLIT_NAME.match(first.source.name)
    if m:
        return ", ".join(f"{m['prefix']}-{i + 1:05d}-of-{count:05d}.gguf" for i in missing)
    return ", ".join(f"split.no {i}" for i in missing)
