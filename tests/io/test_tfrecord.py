"""TFRecord framing and tf.train.Example parsing without TensorFlow, on files the tests write."""
import struct

import numpy as np
import pytest

from meshshard.io.tfrecord import (TFRecordError, crc32c, iter_tfrecord, masked_crc32c, parse_example,
                                   read_tfrecord_at, tfrecord_index)
from tests.io._tfrecord_files import crc32c_ref, encode_example, masked_ref, write_tfrecord


def test_crc32c_known_vectors():
    # RFC 3720 (iSCSI) appendix B.4 and the usual check value
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C
    assert crc32c(b"") == 0


@pytest.mark.parametrize("n", [1, 63, 255, 256, 257, 1000, 4096, 4097, 65535, 65536, 65537, 150001])
def test_crc32c_matches_a_plain_table_crc(n):
    # the chunked numpy CRC agrees with the byte-at-a-time one at every size around its chunk edges
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    assert crc32c(data) == crc32c_ref(data)
    assert masked_crc32c(data) == masked_ref(data)
    assert crc32c(np.frombuffer(data, dtype=np.uint8)) == crc32c_ref(data)


def test_records_round_trip_and_random_access(tmp_path):
    recs = [b"", b"x", bytes(range(256)) * 300, b"last record"]
    path = tmp_path / "a.tfrecord"
    write_tfrecord(path, recs)
    assert list(iter_tfrecord(path)) == recs
    idx = tfrecord_index(path)
    assert [n for _, n in idx] == [len(r) for r in recs]
    assert read_tfrecord_at(path, *idx[2]) == recs[2]
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert list(iter_tfrecord(empty)) == []


def _corrupt(path, pos):
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_corrupted_data_byte_or_crc_raises(tmp_path):
    path = tmp_path / "a.tfrecord"
    write_tfrecord(path, [b"first", b"second record"])
    _corrupt(path, 12 + 5 + 4 + 12 + 3)  # a data byte of record 1
    with pytest.raises(TFRecordError, match=r"CRC of its 13 data bytes does not match"):
        list(iter_tfrecord(path))
    assert len(list(iter_tfrecord(path, verify=False))) == 2  # verify=False reads it anyway
    write_tfrecord(path, [b"first"])
    _corrupt(path, 12 + 5)  # the data CRC itself
    with pytest.raises(TFRecordError, match="does not match"):
        list(iter_tfrecord(path))


def test_a_corrupted_length_raises(tmp_path):
    path = tmp_path / "a.tfrecord"
    write_tfrecord(path, [b"first", b"second"])
    _corrupt(path, 12 + 5 + 4 + 9)  # the length CRC of record 1
    with pytest.raises(TFRecordError, match=r"record 1 at byte 21: the CRC of its length does not match"):
        tfrecord_index(path)


def test_truncated_files_raise(tmp_path):
    path = tmp_path / "a.tfrecord"
    write_tfrecord(path, [b"first", b"second"])
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with pytest.raises(TFRecordError, match="truncated file"):
        tfrecord_index(path)
    path.write_bytes(data[:30])
    with pytest.raises(TFRecordError, match="truncated record header"):
        tfrecord_index(path)
    not_a_record = tmp_path / "b.tfrecord"
    not_a_record.write_bytes(b"this is plain text, not a tfrecord file")
    with pytest.raises(TFRecordError, match="not a TFRecord file"):
        tfrecord_index(not_a_record)


def test_example_of_known_bytes():
    # Example{features{feature{key: "a", value{int64_list{value: [1]}}}}}, encoded by hand from the .proto
    data = bytes.fromhex("0a0c" "0a0a" "0a0161" "1205" "1a03" "0a0101")
    out = parse_example(data)
    assert list(out) == ["a"] and out["a"].dtype == np.int64 and out["a"].tolist() == [1]


@pytest.mark.parametrize("packed", [True, False])
def test_example_round_trip(packed):
    floats = np.array([1.5, -2.25, 3e-8, np.inf], dtype=np.float32)
    ints = np.array([0, 1, -1, 2**40, -(2**63), 2**63 - 1], dtype=np.int64)
    raw = [b"\x00\x01", b"", "é".encode()]
    out = parse_example(encode_example({"f": floats, "i": ints, "b": raw, "empty_f": np.zeros(0, np.float32)},
                                       packed=packed))
    assert set(out) == {"f", "i", "b", "empty_f"}
    assert out["f"].dtype == np.float32 and np.array_equal(out["f"], floats)
    assert out["i"].dtype == np.int64 and np.array_equal(out["i"], ints)
    assert out["b"] == raw
    assert out["empty_f"].size == 0


def test_malformed_examples_raise():
    good = encode_example({"velocity": np.arange(4, dtype=np.float32)})
    with pytest.raises(TFRecordError, match="past the end"):
        parse_example(good[:-3])
    with pytest.raises(TFRecordError, match="wire type"):
        parse_example(bytes([0x0F]))  # field 1, wire type 7
    with pytest.raises(TFRecordError, match="varint"):
        parse_example(bytes([0x08]) + b"\xff" * 11)


def test_length_field_is_little_endian_uint64(tmp_path):
    # the framing written by hand, byte by byte: length, masked crc of it, data, masked crc of data
    data = b"hello"
    frame = struct.pack("<Q", 5) + struct.pack("<I", masked_ref(struct.pack("<Q", 5))) + data + \
        struct.pack("<I", masked_ref(data))
    path = tmp_path / "h.tfrecord"
    path.write_bytes(frame)
    assert tfrecord_index(path) == [(12, 5)]
    assert masked_crc32c(struct.pack("<Q", 5)) == struct.unpack("<I", frame[8:12])[0]
