"""A small GGUF v3 reader and writer in plain Python + NumPy, for the fixture scripts of tests/quant.

It is deliberately separate from journey's C++ reader (src/assets/gguf.cpp) so that the fixtures
are not made by the code they test. It reads the key/value table and the tensor index and hands
out each tensor's raw bytes; it writes files with scalar/string/array values and raw tensors.
"""
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
# ggml type number -> (name, weights per block, bytes per block)   (ggml.h / ggml.c type_traits)
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2),
}
GGML_NUMBER = {name: number for number, (name, _, _) in GGML_TYPES.items()}

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALARS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
            U64: "<Q", I64: "<q", F64: "<d"}


class Reader:
    def __init__(self, path):
        self.path = path
        self.data = open(path, "rb").read()
        self.pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        self.version, = self._unpack("<I")
        n_tensors, n_kv = self._unpack("<QQ")
        self.kv = {}
        for _ in range(n_kv):
            key = self._string()
            vtype, = self._unpack("<I")
            self.kv[key] = (vtype, self._value(vtype))
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._string()
            n_dims, = self._unpack("<I")
            ne = self._unpack("<" + "Q" * n_dims)
            ggml_type, offset = self._unpack("<IQ")
            self.tensors[name] = {"ne": list(ne), "type": ggml_type, "offset": offset}
        alignment = self.kv.get("general.alignment", (U32, 32))[1]
        self.data_start = (self.pos + alignment - 1) // alignment * alignment

    def _take(self, n):
        chunk = self.data[self.pos:self.pos + n]
        if len(chunk) != n:
            raise ValueError(f"{self.path}: truncated at {self.pos}")
        self.pos += n
        return chunk

    def _unpack(self, fmt):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))

    def _string(self):
        n, = self._unpack("<Q")
        return self._take(n).decode("utf-8")

    def _value(self, vtype):
        if vtype == STRING:
            return self._string()
        if vtype == ARRAY:
            etype, count = self._unpack("<IQ")
            return (etype, [self._value(etype) for _ in range(count)])
        return self._unpack(_SCALARS[vtype])[0]

    def raw(self, name, rows=None):
        """The tensor's bytes (the first `rows` rows when given) and its ggml type number and ne."""
        t = self.tensors[name]
        _, block, block_bytes = GGML_TYPES[t["type"]]
        row_bytes = t["ne"][0] // block * block_bytes
        n_rows = int(np.prod(t["ne"][1:])) if len(t["ne"]) > 1 else 1
        take = n_rows if rows is None else rows
        start = self.data_start + t["offset"]
        return self.data[start:start + take * row_bytes], t["type"], t["ne"]


class Writer:
    """Collects key/values and tensors (raw bytes with a ggml type and ne) and writes GGUF v3."""

    def __init__(self):
        self.kv = []
        self.tensors = []

    def add_string(self, key, value):
        self.kv.append((key, STRING, value))

    def add_u32(self, key, value):
        self.kv.append((key, U32, value))

    def add_tensor(self, name, raw, ggml_type, ne):
        self.tensors.append((name, bytes(raw), ggml_type, list(ne)))

    def write(self, path, alignment=32):
        def string(s):
            b = s.encode("utf-8")
            return struct.pack("<Q", len(b)) + b

        out = bytearray(GGUF_MAGIC + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
        for key, vtype, value in self.kv:
            out += string(key) + struct.pack("<I", vtype)
            out += string(value) if vtype == STRING else struct.pack(_SCALARS[vtype], value)
        offset = 0
        offsets = []
        for name, raw, ggml_type, ne in self.tensors:
            offsets.append(offset)
            out += string(name) + struct.pack("<I", len(ne)) + struct.pack("<" + "Q" * len(ne), *ne)
            out += struct.pack("<IQ", ggml_type, offset)
            offset += (len(raw) + alignment - 1) // alignment * alignment
        out += b"\0" * (-len(out) % alignment)
        for (name, raw, _, _), start in zip(self.tensors, offsets):
            out += raw + b"\0" * (-len(raw) % alignment)
        open(path, "wb").write(out)
