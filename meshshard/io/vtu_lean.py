"""A lean reader of the common ``.vtu`` layout: each array decoded as the parser reaches it.

meshio's ``.vtu`` reader parses the whole XML tree first and keeps every array's base64 text until
the end, then decodes copies of it: several times the mesh arrays at once. This reader streams the
file (:func:`xml.etree.ElementTree.iterparse`), decodes each ``DataArray`` when its closing tag is
read and drops its text at once, and hands the arrays to meshio's own cell grouping, so the
:class:`meshio.Mesh` it returns equals ``meshio.read``'s.

Read here: an ``UnstructuredGrid`` in one ``Piece``, little-endian, its arrays inline binary
(``format="binary"``), uncompressed or zlib-compressed (meshio's default). Anything else (ASCII,
appended or LZMA-compressed data, several pieces, field data) is left to meshio: :func:`read_vtu`
returns ``None``.
"""
from __future__ import annotations

import binascii
import math
import os
import zlib
from typing import Dict, Optional, Union
from xml.etree import ElementTree as ET

import numpy as np

__all__ = ["read_vtu"]

PathLike = Union[str, os.PathLike]

_SECTIONS = ("Points", "Cells", "PointData", "CellData")


class _Unsupported(Exception):
    """A layout this reader leaves to meshio."""


def read_vtu(path: PathLike):
    """Read a ``.vtu`` file of the layout above as a :class:`meshio.Mesh`.

    Args:
        path: the ``.vtu`` file.

    Returns:
        the mesh, equal to ``meshio.read(path)``'s (points, cell blocks, point and cell data); or
        ``None`` when the file has another layout or cannot be parsed here (read it with meshio,
        which also reports a damaged file).
    """
    try:
        return _read(path)
    except (_Unsupported, ET.ParseError, ValueError, KeyError, binascii.Error, zlib.error):
        return None


def _b64_chars(nbytes: int) -> int:
    """Base64 characters that encode ``nbytes`` bytes (padding included)."""
    return int(math.ceil(nbytes / 3) * 4)


def _decode_zlib(text: str, dtype: np.dtype, header_dtype: np.dtype) -> np.ndarray:
    """A zlib-compressed array: a base64 header ``[blocks, block size, last block size, compressed
    sizes...]``, then the compressed blocks in one base64 stream, each inflated into the output."""
    data = text.strip()
    item = header_dtype.itemsize
    blocks = int(np.frombuffer(binascii.a2b_base64(data[:_b64_chars(item)])[:item], header_dtype)[0])
    head_chars = _b64_chars(item * (3 + blocks))
    header = np.frombuffer(binascii.a2b_base64(data[:head_chars]), header_dtype)[:3 + blocks].astype(np.int64)
    if header.shape[0] != 3 + blocks:
        raise _Unsupported("short header")
    raw = binascii.a2b_base64(data[head_chars:])
    del data
    block, last = int(header[1]), int(header[2])
    total = 0 if blocks == 0 else (blocks - 1) * block + (last or block)
    if total % dtype.itemsize:
        raise _Unsupported("array size")
    out = np.empty(total // dtype.itemsize, dtype.newbyteorder("="))
    view = out.view(np.uint8)
    at = src = 0
    for size in header[3:]:
        chunk = zlib.decompress(raw[src:src + int(size)])
        if at + len(chunk) > total:
            raise _Unsupported("block sizes")
        view[at:at + len(chunk)] = np.frombuffer(chunk, np.uint8)
        at, src = at + len(chunk), src + int(size)
    if at != total:
        raise _Unsupported("block sizes")
    return out


def _decode(elem, header_dtype, compressed: bool) -> np.ndarray:
    """One inline binary DataArray: header (byte count) then the values, base64; or zlib blocks."""
    from meshio.vtu._vtu import vtu_to_numpy_type

    if elem.attrib.get("format") != "binary":
        raise _Unsupported("not inline binary")
    dtype = np.dtype(vtu_to_numpy_type[elem.attrib["type"]]).newbyteorder("<")
    text = elem.text or ""
    if compressed:
        data = _decode_zlib(text, dtype, header_dtype)
        del text
        elem.text = None
        return _components(data, elem)
    raw = binascii.a2b_base64(text)  # skips the line breaks; stops at padding
    head = np.dtype(header_dtype).itemsize
    if len(raw) < head:
        raise _Unsupported("short array")
    nbytes = int(np.frombuffer(raw, header_dtype, 1)[0])
    if len(raw) == head:  # header encoded on its own (VTK's writers): the values follow in a second block
        header_len = len(binascii.b2a_base64(raw, newline=False))
        raw = binascii.a2b_base64(text.strip()[header_len:])
        start = 0
    else:
        start = head
    del text
    elem.text = None
    if nbytes % dtype.itemsize or start + nbytes > len(raw):
        raise _Unsupported("array size")
    return _components(np.frombuffer(raw, dtype, nbytes // dtype.itemsize, start).astype(dtype.newbyteorder("=")),
                       elem)


def _components(data: np.ndarray, elem) -> np.ndarray:
    """``data`` as ``[-1, NumberOfComponents]`` when the DataArray names its components."""
    if "NumberOfComponents" in elem.attrib and elem.attrib["NumberOfComponents"] != "":
        data = data.reshape(-1, int(elem.attrib["NumberOfComponents"]))
    return data


def _read(path: PathLike):
    import meshio
    from meshio.vtu._vtu import _organize_cells, vtu_to_numpy_type

    header_dtype = None
    compressed = False
    num_points = num_cells = None
    points = None
    arrays: Dict[str, Dict[str, np.ndarray]] = {s: {} for s in _SECTIONS}
    section: Optional[str] = None
    pieces = 0
    for event, elem in ET.iterparse(str(path), events=("start", "end")):
        tag = elem.tag
        if event == "start":
            if tag == "VTKFile":
                a = elem.attrib
                if a.get("type") != "UnstructuredGrid" or a.get("compressor", "vtkZLibDataCompressor") != \
                        "vtkZLibDataCompressor" or \
                        a.get("byte_order", "LittleEndian") != "LittleEndian" or a.get("version", "0.1") not in ("0.1", "1.0"):
                    raise _Unsupported("file kind")
                header_dtype = np.dtype(vtu_to_numpy_type[a.get("header_type", "UInt32")]).newbyteorder("<")
                compressed = "compressor" in a
            elif tag == "Piece":
                pieces += 1
                if pieces > 1:
                    raise _Unsupported("several pieces")
                num_points, num_cells = int(elem.attrib["NumberOfPoints"]), int(elem.attrib["NumberOfCells"])
            elif tag in _SECTIONS:
                section = tag
            elif tag not in ("UnstructuredGrid", "DataArray", "InformationKey", "Value"):  # (array metadata)
                raise _Unsupported(tag)  # FieldData, AppendedData, ...
            continue
        if tag == "DataArray":
            if section is None or header_dtype is None:
                raise _Unsupported("array outside a section")
            arr = _decode(elem, header_dtype, compressed)
            if section == "Points":
                points = arr
            else:
                arrays[section][elem.attrib["Name"]] = arr  # (no name: meshio reports it)
            elem.clear()
        elif tag in _SECTIONS:
            section = None
            elem.clear()
    if points is None or num_points is None:
        raise _Unsupported("no points")
    points = points.reshape(num_points, -1)
    cells = arrays["Cells"]
    if "offsets" not in cells or "types" not in cells or len(cells["offsets"]) != num_cells \
            or len(cells["types"]) != num_cells:
        raise _Unsupported("cells")
    out_cells, cell_data = _organize_cells(np.array([0]), [cells], [arrays["CellData"]])
    return meshio.Mesh(points, out_cells, point_data=arrays["PointData"] or None, cell_data=cell_data,
                       field_data={})
