"""A minimal GGUF v3 reader/writer for making fuzz seeds (fuzz/make_seeds.py); not used by journey."""
import struct

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _read_str(b, o):
    (n,) = struct.unpack_from("<Q", b, o)
    return b[o + 8:o + 8 + n].decode("utf-8", "replace"), o + 8 + n


def _read_value(b, o, t):
    if t in SCALARS:
        v = struct.unpack_from(SCALARS[t], b, o)[0]
        return v, o + struct.calcsize(SCALARS[t])
    if t == 8:
        return _read_str(b, o)
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        items = []
        for _ in range(n):
            v, o = _read_value(b, o, et)
            items.append(v)
        return (et, items), o
    raise ValueError(f"type {t}")


def read(data):
    """data: the file's bytes."""
    b = data
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", b, 0)
    o = 24
    kv = []
    for _ in range(n_kv):
        k, o = _read_str(b, o)
        (t,) = struct.unpack_from("<I", b, o)
        o += 4
        v, o = _read_value(b, o, t)
        kv.append((k, t, v))
    tensors = []
    for _ in range(n_tensors):
        name, o = _read_str(b, o)
        (nd,) = struct.unpack_from("<I", b, o)
        o += 4
        ne = list(struct.unpack_from(f"<{nd}Q", b, o))
        o += 8 * nd
        gt, off = struct.unpack_from("<IQ", b, o)
        o += 12
        tensors.append((name, ne, gt, off))
    return kv, tensors


def _write_str(s):
    e = s.encode("utf-8")
    return struct.pack("<Q", len(e)) + e


def _write_value(t, v):
    if t in SCALARS:
        return struct.pack(SCALARS[t], v)
    if t == 8:
        return _write_str(v)
    et, items = v
    return struct.pack("<IQ", et, len(items)) + b"".join(_write_value(et, i) for i in items)


def write(path, kv, tensors, alignment=32):
    """tensors: (name, ne innermost first, ggml type 0 = F32, bytes)."""
    out = struct.pack("<4sIQQ", b"GGUF", 3, len(tensors), len(kv))
    for k, t, v in kv:
        out += _write_str(k) + struct.pack("<I", t) + _write_value(t, v)
    offset = 0
    for name, ne, gt, data in tensors:
        out += _write_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", gt, offset)
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    for name, ne, gt, data in tensors:
        out += data + b"\0" * (-len(data) % alignment)
    open(path, "wb").write(out)
