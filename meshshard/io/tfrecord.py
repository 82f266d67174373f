"""TFRecord files and ``tf.train.Example`` records, read without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64 length            little endian
    uint32 masked_crc32c(the 8 length bytes)
    bytes  data[length]
    uint32 masked_crc32c(data)

where ``masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8`` (mod 2**32) of the CRC-32C
(Castagnoli) ``c`` of ``x``. A ``tf.train.Example`` is the protobuf message::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }    # entries: { string key = 1; Feature value = 2; }
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1; }
    Int64List { repeated int64 value = 1; }

This module reads both by hand (the protobuf wire format: varints and length-delimited fields),
so the MeshGraphNets datasets open with numpy alone. The CRC is computed with numpy over many
chunks of a record at once and combined with the linearity of the CRC, so checking a record of
tens of megabytes costs a fraction of a second.
"""
from __future__ import annotations

import os
import struct
from functools import lru_cache
from pathlib import Path
from typing import Dict, Iterator, List, Tuple, Union

import numpy as np

__all__ = ["crc32c", "masked_crc32c", "tfrecord_index", "read_tfrecord_at", "iter_tfrecord", "parse_example",
           "TFRecordError"]

PathLike = Union[str, os.PathLike]
_POLY = 0x82F63B78  # CRC-32C, reflected
_MASK_DELTA = 0xA282EAD8
_HEADER = 12  # uint64 length + uint32 crc of it
_FOOTER = 4  # uint32 crc of the data


class TFRecordError(ValueError):
    """A TFRecord file or an Example record is malformed (bad framing, CRC mismatch, truncation)."""


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _byte_table()
_TABLE_LIST = [int(v) for v in _TABLE]


# A linear map of the 32-bit CRC register is stored as the images of its 32 basis bits.
def _apply(cols: Tuple[int, ...], s: int) -> int:
    out = 0
    bit = 0
    while s:
        if s & 1:
            out ^= cols[bit]
        s >>= 1
        bit += 1
    return out


@lru_cache(maxsize=None)
def _zeros_operator(log2n: int) -> Tuple[int, ...]:
    """The register map of feeding 2**log2n zero bytes (with no init or final xor)."""
    if log2n == 0:
        return tuple(_TABLE_LIST[(1 << k) & 0xFF] ^ ((1 << k) >> 8) for k in range(32))
    half = _zeros_operator(log2n - 1)
    return tuple(_apply(half, c) for c in half)


@lru_cache(maxsize=None)
def _zeros_tables(log2n: int) -> np.ndarray:
    """[4, 256] lookup tables of :func:`_zeros_operator`, one per byte of the register."""
    cols = _zeros_operator(log2n)
    out = np.zeros((4, 256), dtype=np.uint32)
    for k in range(4):
        for b in range(256):
            out[k, b] = _apply(cols, b << (8 * k))
    return out


def _advance(s: np.ndarray, log2n: int) -> np.ndarray:
    """Registers ``s`` (uint32 array) fed 2**log2n zero bytes."""
    t = _zeros_tables(log2n)
    return t[0][s & 0xFF] ^ t[1][(s >> 8) & 0xFF] ^ t[2][(s >> 16) & 0xFF] ^ t[3][s >> 24]


def _advance_int(s: int, n: int) -> int:
    """Register ``s`` fed ``n`` zero bytes (any n), from the power-of-two maps."""
    k = 0
    while n:
        if n & 1:
            s = _apply(_zeros_operator(k), s)
        n >>= 1
        k += 1
    return s


def crc32c(data: Union[bytes, bytearray, memoryview, np.ndarray]) -> int:
    """CRC-32C (Castagnoli, as iSCSI and TFRecord use) of ``data``.

    Args:
        data: the bytes (a uint8 array is taken as its bytes).

    Returns:
        the checksum as an int in ``[0, 2**32)``; ``crc32c(b"123456789") == 0xE3069283``.
    """
    buf = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8) if not isinstance(data, np.ndarray) \
        else np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    n = buf.size
    init = _advance_int(0xFFFFFFFF, n)  # crc(data) = raw(0, data) ^ zeros_n(init), then the final xor
    if n < 256:
        s = 0
        for b in buf.tolist():
            s = _TABLE_LIST[(s ^ b) & 0xFF] ^ (s >> 8)
        return (s ^ init) ^ 0xFFFFFFFF
    # chunks of 2**k bytes run side by side; leading zero bytes leave a zero register unchanged
    log_len = 6 if n < (1 << 16) else 10
    chunk = 1 << log_len
    m = -(-n // chunk)
    m_pad = 1 << (m - 1).bit_length()
    padded = np.zeros(m_pad * chunk, dtype=np.uint8)
    padded[padded.size - n:] = buf
    cols = np.ascontiguousarray(padded.reshape(m_pad, chunk).T)  # [chunk, m_pad]: row j = byte j of every chunk
    s = np.zeros(m_pad, dtype=np.uint32)
    for j in range(chunk):
        s = _TABLE[(s ^ cols[j]) & 0xFF] ^ (s >> 8)
    # pairwise: register(A || B) = advance(register(A), |B|) ^ register(B)
    level = log_len
    while s.size > 1:
        s = _advance(s[0::2], level) ^ s[1::2]
        level += 1
    return (int(s[0]) ^ init) ^ 0xFFFFFFFF


def masked_crc32c(data: Union[bytes, bytearray, memoryview, np.ndarray]) -> int:
    """The masked CRC-32C that TFRecord framing stores.

    Args:
        data: the bytes.

    Returns:
        ``((c >> 15) | (c << 17)) + 0xa282ead8`` mod 2**32 with ``c = crc32c(data)``.
    """
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def tfrecord_index(path: PathLike, verify: bool = True) -> List[Tuple[int, int]]:
    """Where every record of a TFRecord file lies, found by reading only the framing headers.

    Args:
        path: the ``.tfrecord`` file.
        verify: check each length's CRC.

    Returns:
        list of ``(offset of the data, length of the data)`` per record, in file order.

    Raises:
        FileNotFoundError: no such file.
        TFRecordError: a header with a bad CRC, or a record running past the end of the file.
    """
    path = Path(path)
    size = path.stat().st_size
    out = []
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            if size - pos < _HEADER:
                raise TFRecordError(f"{path}: truncated record header at byte {pos} "
                                    f"({size - pos} bytes left, a header has {_HEADER})")
            header = f.read(_HEADER)
            (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if verify and masked_crc32c(header[:8]) != crc:
                raise TFRecordError(f"{path}: record {len(out)} at byte {pos}: the CRC of its length does not "
                                    "match (corrupt file, or not a TFRecord file)")
            end = pos + _HEADER + length + _FOOTER
            if end > size:
                raise TFRecordError(f"{path}: record {len(out)} at byte {pos} claims {length} bytes but the file "
                                    f"ends {end - size} bytes too early (truncated file)")
            out.append((pos + _HEADER, length))
            pos = end
            f.seek(pos)
    return out


def read_tfrecord_at(path: PathLike, offset: int, length: int, verify: bool = True) -> bytes:
    """One record's data, at an ``(offset, length)`` from :func:`tfrecord_index`.

    Args:
        path: the ``.tfrecord`` file.
        offset: byte offset of the data.
        length: its length in bytes.
        verify: check the data's CRC.

    Returns:
        the record's bytes.

    Raises:
        TFRecordError: the data's CRC does not match, or the file is shorter than the record.
    """
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(length)
        footer = f.read(_FOOTER)
    if len(data) != length or len(footer) != _FOOTER:
        raise TFRecordError(f"{path}: record at byte {offset - _HEADER} is truncated")
    if verify and masked_crc32c(data) != struct.unpack("<I", footer)[0]:
        raise TFRecordError(f"{path}: record at byte {offset - _HEADER}: the CRC of its {length} data bytes "
                            "does not match (corrupt file)")
    return data


def iter_tfrecord(path: PathLike, verify: bool = True) -> Iterator[bytes]:
    """The data of every record of a TFRecord file, in order, one record in memory at a time.

    Args:
        path: the ``.tfrecord`` file.
        verify: check the CRCs of lengths and data.

    Yields:
        each record's bytes.

    Raises:
        TFRecordError: as :func:`tfrecord_index` and :func:`read_tfrecord_at`.
    """
    for offset, length in tfrecord_index(path, verify=verify):
        yield read_tfrecord_at(path, offset, length, verify=verify)


# ---- protobuf wire format ------------------------------------------------------------------------

def _varint(buf: memoryview, pos: int, end: int) -> Tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise TFRecordError("Example record: a varint runs past the end of its message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise TFRecordError("Example record: a varint longer than 10 bytes")


def _fields(buf: memoryview, pos: int, end: int) -> Iterator[Tuple[int, int, object]]:
    """(field number, wire type, value) of a message: an int for varint/fixed, (start, stop) for bytes."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise TFRecordError("Example record: a 64-bit field runs past the end of its message")
            value, pos = bytes(buf[pos:pos + 8]), pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise TFRecordError(f"Example record: field {number} claims {n} bytes, past the end of its message")
            value, pos = (pos, pos + n), pos + n
        elif wire == 5:
            if pos + 4 > end:
                raise TFRecordError("Example record: a 32-bit field runs past the end of its message")
            value, pos = bytes(buf[pos:pos + 4]), pos + 4
        else:
            raise TFRecordError(f"Example record: unsupported protobuf wire type {wire} (field {number})")
        yield number, wire, value


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= (1 << 63) else v


def _feature(buf: memoryview, start: int, stop: int):
    kinds = []
    for number, wire, value in _fields(buf, start, stop):
        if wire != 2 or number not in (1, 2, 3):
            continue
        s, e = value
        if number == 1:  # BytesList
            kinds.append([bytes(buf[a:b]) for n, w, (a, b) in _fields(buf, s, e) if n == 1 and w == 2])
        elif number == 2:  # FloatList: packed (wire 2) or one fixed32 per value (wire 5)
            parts = []
            for n, w, v in _fields(buf, s, e):
                if n != 1:
                    continue
                if w == 2:
                    a, b = v
                    if (b - a) % 4:
                        raise TFRecordError("Example record: a packed float list is not a multiple of 4 bytes")
                    parts.append(np.frombuffer(buf[a:b], dtype="<f4"))
                elif w == 5:
                    parts.append(np.frombuffer(v, dtype="<f4"))
            kinds.append(np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32))
        else:  # Int64List: packed varints (wire 2) or one varint per value (wire 0)
            vals: List[int] = []
            for n, w, v in _fields(buf, s, e):
                if n != 1:
                    continue
                if w == 2:
                    a, b = v
                    while a < b:
                        x, a = _varint(buf, a, b)
                        vals.append(_signed64(x))
                elif w == 0:
                    vals.append(_signed64(v))
            kinds.append(np.asarray(vals, dtype=np.int64))
    if not kinds:
        return []  # an empty Feature (no kind set)
    return kinds[-1]  # protobuf: the last member of a oneof wins


def parse_example(data: Union[bytes, bytearray, memoryview]) -> Dict[str, Union[List[bytes], np.ndarray]]:
    """Decode a serialized ``tf.train.Example``.

    Args:
        data: the record's bytes.

    Returns:
        dict feature name -> its values: a list of ``bytes`` (BytesList), a float32 array [n]
        (FloatList) or an int64 array [n] (Int64List).

    Raises:
        TFRecordError: the bytes are not a well-formed Example.
    """
    buf = memoryview(data).cast("B")
    out: Dict[str, Union[List[bytes], np.ndarray]] = {}
    for number, wire, value in _fields(buf, 0, len(buf)):
        if number != 1 or wire != 2:
            continue
        for n, w, entry in _fields(buf, *value):  # Features
            if n != 1 or w != 2:
                continue
            key, feat = None, None
            for en, ew, ev in _fields(buf, *entry):  # map entry
                if en == 1 and ew == 2:
                    try:
                        key = bytes(buf[ev[0]:ev[1]]).decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise TFRecordError("Example record: a feature name is not UTF-8") from exc
                elif en == 2 and ew == 2:
                    feat = ev
            if key is None:
                raise TFRecordError("Example record: a feature without a name")
            out[key] = _feature(buf, *feat) if feat is not None else []
    return out
