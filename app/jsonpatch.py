"""RFC 6902 JSON Patch between two JSON documents (what any RFC 6902 implementation applies back).

Objects are compared key by key; arrays index by index, then extended at the end or shortened from
the end; anything else that differs (in value or in JSON type) is replaced whole.
"""

from __future__ import annotations

from typing import Any


def pointer_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _same(a: Any, b: Any) -> bool:
    # JSON types matter: 1, 1.0 and true are equal in Python but not the same JSON.
    return type(a) is type(b) and a == b


def diff(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        ops: list[dict[str, Any]] = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{pointer_token(key)}"})
        for key, value in new.items():
            where = f"{path}/{pointer_token(key)}"
            if key not in old:
                ops.append({"op": "add", "path": where, "value": value})
            else:
                ops += diff(old[key], value, where)
        return ops
    if isinstance(old, list) and isinstance(new, list):
        ops = []
        common = min(len(old), len(new))
        for i in range(common):
            ops += diff(old[i], new[i], f"{path}/{i}")
        for i in range(common, len(new)):
            ops.append({"op": "add", "path": f"{path}/{i}", "value": new[i]})
        for i in range(len(old) - 1, common - 1, -1):
            ops.append({"op": "remove", "path": f"{path}/{i}"})
        return ops
    if _same(old, new):
        return []
    return [{"op": "replace", "path": path, "value": new}]
