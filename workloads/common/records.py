"""TFRecord framing and the protobuf wire format, written directly from their
public definitions, for the Python generators of test data and fuzz seeds
(workloads/imagenet/make_imagenet.py, workloads/wmt/tools/wmt_data.py,
fuzz/make_seeds.py). The C++ readers they feed are
workloads/common/tfrecord.{h,cc}; nothing here is shared with them.

TFRecord framing of one record: uint64 length (little endian), uint32
masked CRC32C of those 8 bytes, the data, uint32 masked CRC32C of the data;
masked_crc(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.

Import it by path: sys.path.insert(0, <repo>/workloads/common).
"""

import struct

# --- protobuf wire format ----------------------------------------------------


def varint(n):
    """Base-128 varint; negative numbers as their 64-bit two's complement."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, n):
    return varint(num << 3) + varint(n)


def field_bytes(num, data):
    """A length-delimited field; str is written as UTF-8."""
    if isinstance(data, str):
        data = data.encode()
    return varint((num << 3) | 2) + varint(len(data)) + data


# --- CRC32C (Castagnoli), table-driven ----------------------------------------

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    """CRC32C of data, continuing from crc (0 to start)."""
    c = crc ^ 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# --- TFRecord -----------------------------------------------------------------

def tfrecord(records):
    """The bytes of a TFRecord file holding records (each bytes)."""
    out = bytearray()
    for r in records:
        length = struct.pack("<Q", len(r))
        out += length + struct.pack("<I", masked_crc(length))
        out += r + struct.pack("<I", masked_crc(r))
    return bytes(out)


def write_tfrecord(path, records):
    with open(path, "wb") as f:
        f.write(tfrecord(records))
