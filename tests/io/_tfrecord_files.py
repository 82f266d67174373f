"""Writers of TFRecord files and tf.train.Example records for the tests, written from the formats'
specifications and independent of meshshard.io.tfrecord (its own table CRC, its own protobuf encoder)."""
import json
import struct

import numpy as np

__all__ = ["crc32c_ref", "masked_ref", "encode_example", "write_tfrecord", "write_mgn_dataset"]


def _table():
    out = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


_T = _table()


def crc32c_ref(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_ref(data: bytes) -> int:
    c = crc32c_ref(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64: ten bytes of two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_example(features: dict, packed: bool = True) -> bytes:
    """name -> list of bytes (BytesList), float array (FloatList) or int array (Int64List)."""
    entries = b""
    for name, value in features.items():
        if isinstance(value, list):
            feat = _ld(1, b"".join(_ld(1, v) for v in value))
        elif np.asarray(value).dtype.kind == "f":
            vals = np.asarray(value, dtype="<f4")
            body = _ld(1, vals.tobytes()) if packed else \
                b"".join(_varint(1 << 3 | 5) + struct.pack("<f", v) for v in vals.tolist())
            feat = _ld(2, body)
        else:
            vals = [int(v) for v in np.asarray(value).reshape(-1)]
            body = _ld(1, b"".join(_varint(v) for v in vals)) if packed else \
                b"".join(_varint(1 << 3 | 0) + _varint(v) for v in vals)
            feat = _ld(3, body)
        entries += _ld(1, _ld(1, name.encode()) + _ld(2, feat))
    return _ld(1, entries)


def write_tfrecord(path, records) -> None:
    with open(path, "wb") as f:
        for data in records:
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked_ref(length)) + data + struct.pack("<I", masked_ref(data)))


def write_mgn_dataset(folder, trajectories, meta, split="train") -> None:
    """trajectories: list of dicts name -> numpy array in meta's dtype and shape (static [1, N, F])."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").write_text(json.dumps(meta))
    recs = [encode_example({k: [np.ascontiguousarray(v, dtype=np.dtype(meta["features"][k]["dtype"]).newbyteorder("<"))
                                .tobytes()] for k, v in t.items()}) for t in trajectories]
    write_tfrecord(folder / f"{split}.tfrecord", recs)
