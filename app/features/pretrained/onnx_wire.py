"""The protobuf wire format of an ONNX file, read and written without the onnx package (the service does not
install it): just the pieces the project needs, a message's fields in order and a length-delimited field.

Two readers use it: ort_blocked.py edits the front-end's optimised graph node by node, and the model folders'
custom-op check (app/encoders/onnx_folder/custom_ops.py) reads which operator domains a model imports."""

from __future__ import annotations

LENGTH_DELIMITED = 2  # the wire type of strings, bytes and embedded messages


def varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint starting at ``data[i]`` and the index after it."""
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def fields(data: bytes) -> list[tuple[int, int, bytes, bytes]]:
    """(field number, wire type, the field's raw bytes, its payload if length-delimited else b"") of a message,
    in order; ValueError for a wire type this reader does not know (groups), IndexError for truncated data."""
    out, i = [], 0
    while i < len(data):
        start = i
        key, i = varint(data, i)
        payload = b""
        wire = key & 7
        if wire == 0:
            _, i = varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == LENGTH_DELIMITED:
            size, i = varint(data, i)
            if i + size > len(data):
                raise IndexError("protobuf field runs past the end of its message")
            payload, i = data[i:i + size], i + size
        else:
            raise ValueError(f"protobuf wire type {wire} is not read here")
        out.append((key >> 3, wire, data[start:i], payload))
    return out


def length_delimited(number: int, payload: bytes) -> bytes:
    """One length-delimited field, encoded."""
    return encode_varint(number << 3 | LENGTH_DELIMITED) + encode_varint(len(payload)) + payload


def string_field(message: bytes, number: int) -> str:
    """The first length-delimited field ``number`` of ``message`` as UTF-8 text; "" when it is absent."""
    return next((payload.decode("utf-8") for n, wire, _, payload in fields(message)
                 if n == number and wire == LENGTH_DELIMITED), "")
