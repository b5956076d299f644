"""Arrow IPC stream files written directly from the format's public
definition (format/Message.fbs, format/Schema.fbs, the IPC "encapsulated
message" framing), for the tests and fuzz seeds of the finewebedu_lm
reader (workloads/finewebedu_lm/arrow_stream.{h,cc}): streams of one
list<int32> column as `datasets` writes them, and the hostile shapes a
reader must refuse cheaply (a schema that is a DAG, metadata that claims
more than any real stream holds). Nothing here is shared with the C++
reader.

A message: 0xFFFFFFFF, int32 length of the metadata (padded to 8 bytes), a
flatbuffer `Message`, then the body (its buffers, each padded to 8 bytes);
the stream ends with 0xFFFFFFFF 0x00000000.

Import it by path: sys.path.insert(0, <repo>/workloads/finewebedu_lm).
"""

import struct

# Type union ids (Schema.fbs) and MessageHeader ids (Message.fbs).
INT, LIST, STRUCT = 2, 12, 13
SCHEMA, RECORD_BATCH = 1, 3
V5 = 4


# --- a flatbuffer written front to back -------------------------------------
#
# Every object is laid out after all that refer to it (a topological order
# of the object graph), so every uoffset is positive, also where an object
# is shared; each table's vtable sits just before it.


class Table:
    """fields: {slot: (kind, value)}, kind one of u8 bool i16 i32 i64 off."""

    def __init__(self, fields):
        self.fields = fields


class Vector:
    """Offsets to objects (items), or structs packed as `fmt` (structs)."""

    def __init__(self, items=None, fmt=None, structs=None):
        self.items, self.fmt, self.structs = items, fmt, structs


class String:
    def __init__(self, text):
        self.data = text.encode() if isinstance(text, str) else text


_SIZE = {"u8": 1, "bool": 1, "i16": 2, "i32": 4, "i64": 8, "off": 4}
_FMT = {"u8": "<B", "bool": "<B", "i16": "<h", "i32": "<i", "i64": "<q"}


def _pad(buf, align):
    buf += b"\0" * (-len(buf) % align)


def _refs(obj):
    if isinstance(obj, Table):
        return [v for k, v in obj.fields.values() if k == "off"]
    if isinstance(obj, Vector) and obj.items is not None:
        return obj.items
    return []


def flatbuffer(root):
    """The bytes of a flatbuffer whose root table is `root`."""
    waiting, stack, seen = {}, [root], {id(root)}
    while stack:  # references to each object
        for child in _refs(stack.pop()):
            waiting[id(child)] = waiting.get(id(child), 0) + 1
            if id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    buf = bytearray(4)
    patches = {id(root): [0]}
    ready = [root]

    def refer(at, child):
        patches.setdefault(id(child), []).append(at)
        waiting[id(child)] -= 1
        if waiting[id(child)] == 0:
            ready.append(child)

    while ready:
        obj = ready.pop(0)
        pos = _emit(buf, obj, refer)
        for at in patches.pop(id(obj)):
            struct.pack_into("<I", buf, at, pos - at)
    _pad(buf, 8)
    return bytes(buf)


def _emit(buf, obj, refer):
    if isinstance(obj, String):
        _pad(buf, 4)
        pos = len(buf)
        buf += struct.pack("<I", len(obj.data)) + obj.data + b"\0"
        return pos
    if isinstance(obj, Vector):
        if obj.items is not None:
            _pad(buf, 4)
            pos = len(buf)
            buf += struct.pack("<I", len(obj.items))
            buf += bytes(4 * len(obj.items))
            for i, item in enumerate(obj.items):
                refer(pos + 4 + 4 * i, item)
            return pos
        while len(buf) % 8 != 4:  # the elements 8-aligned
            buf += b"\0"
        pos = len(buf)
        buf += struct.pack("<I", len(obj.structs))
        for s in obj.structs:
            buf += struct.pack(obj.fmt, *s)
        return pos
    # A table: its vtable, then the table 8-aligned (for i64 fields).
    slots = obj.fields
    nslots = max(slots) + 1 if slots else 0
    layout, size = {}, 4
    for slot in sorted(slots, key=lambda s: -_SIZE[slots[s][0]]):
        n = _SIZE[slots[slot][0]]
        size += -size % n
        layout[slot] = size
        size += n
    vt = struct.pack("<HH", 4 + 2 * nslots, size)
    vt += b"".join(struct.pack("<H", layout.get(s, 0)) for s in range(nslots))
    while (len(buf) + len(vt)) % 8:
        buf += b"\0"
    vpos = len(buf)
    buf += vt
    pos = len(buf)
    body = bytearray(size)
    struct.pack_into("<i", body, 0, pos - vpos)
    buf += body
    for slot, (kind, value) in slots.items():
        if kind == "off":
            refer(pos + layout[slot], value)
        else:
            struct.pack_into(_FMT[kind], buf, pos + layout[slot], value)
    return pos


# --- Schema.fbs and Message.fbs ----------------------------------------------

def int_type(bits=32, signed=True):
    return Table({0: ("i32", bits), 1: ("bool", int(signed))})


def field(name, type_id, type_table, children=(), nullable=True):
    """A Field table (name 0, nullable 1, type_type 2, type 3, children 5);
    `name` a str or a shared String."""
    return Table({0: ("off", name if isinstance(name, String)
                       else String(name)),
                   1: ("bool", int(nullable)), 2: ("u8", type_id),
                   3: ("off", type_table),
                   5: ("off", children if isinstance(children, Vector)
                       else Vector(items=list(children)))})


def list_of_int(name="input_ids", bits=32):
    return field(name, LIST, Table({}),
                 [field("item", INT, int_type(bits))])


def message(header_type, header, body_length=0):
    """A Message table: version 0, header_type 1, header 2, bodyLength 3."""
    return Table({0: ("i16", V5), 1: ("u8", header_type),
                   2: ("off", header), 3: ("i64", body_length)})


def schema(fields):
    return Table({0: ("i16", 0), 1: ("off", Vector(items=list(fields)))})


def framed(metadata, body=b""):
    """One encapsulated message: marker, length, metadata, body."""
    return struct.pack("<Ii", 0xFFFFFFFF, len(metadata)) + metadata + body


END = struct.pack("<Ii", 0xFFFFFFFF, 0)


def record_batch(rows):
    """A RecordBatch message of one list<int32> column holding `rows`
    (lists of ints), and its body."""
    offsets = [0]
    for r in rows:
        offsets.append(offsets[-1] + len(r))
    obuf = struct.pack(f"<{len(offsets)}i", *offsets)
    obuf += b"\0" * (-len(obuf) % 8)
    values = [v for r in rows for v in r]
    vbuf = struct.pack(f"<{len(values)}i", *values)
    vbuf += b"\0" * (-len(vbuf) % 8)
    nodes = Vector(fmt="<qq", structs=[(len(rows), 0), (len(values), 0)])
    buffers = Vector(fmt="<qq", structs=[
        (0, 0), (0, 4 * len(offsets)),
        (len(obuf), 0), (len(obuf), 4 * len(values))])
    batch = Table({0: ("i64", len(rows)), 1: ("off", nodes),
                    2: ("off", buffers)})
    body = obuf + vbuf
    return framed(flatbuffer(message(RECORD_BATCH, batch, len(body))), body)


def token_stream(batches, column="input_ids"):
    """A whole stream: the schema of one list<int32> column, then one record
    batch per entry of `batches` (each a list of rows), then the end."""
    out = framed(flatbuffer(message(SCHEMA, schema([list_of_int(column)]))))
    for rows in batches:
        out += record_batch(rows)
    return out + END


def dag_schema_stream(levels=60):
    """A stream whose schema is a DAG: a struct column whose children name
    one child table twice, `levels` deep, before input_ids. Walked as a
    tree it has 2^levels nodes; its bytes are a few KB."""
    name = String("s")
    empty = Table({})
    node = field(name, INT, int_type())
    for _ in range(levels):
        node = field(name, STRUCT, empty, Vector(items=[node, node]))
    fields = [node, list_of_int()]
    return framed(flatbuffer(message(SCHEMA, schema(fields)))) + END


def claimed_metadata_prefix(length=0x7FFFFFF8):
    """The first 8 bytes of a stream whose first message claims `length`
    bytes of metadata: with a sparse file of that size behind them, a reader
    that believes the claim allocates and reads it all."""
    return struct.pack("<Ii", 0xFFFFFFFF, length)
