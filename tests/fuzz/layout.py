"""Every on-media structure the v2 fuzzer mutates, as one table of fields: name -> (offset,
struct format) within the structure, mirrored from native/pool/format.h, native/ring/ring.h,
native/msg/msg.h (and win.cpp's window header), native/rpc/rpc.h, include/cxlkit.h (the KV
block header) and cxlkit/kv/recency.py. tests/fuzz/test_fuzz_v2.py compiles the C side of each
entry (CSIDE) and checks offset and size against this table."""
from __future__ import annotations

import struct

Field = tuple[int, str]


def _fields(spec: str) -> dict[str, Field]:
    """'name@off:fmt ...' -> {name: (off, '<fmt')}."""
    out = {}
    for item in spec.split():
        name, rest = item.split("@")
        off, fmt = rest.split(":")
        out[name] = (int(off), "<" + fmt)
    return out


STRUCTS: dict[str, dict[str, Field]] = {
    "superblock": _fields(
        "magic@0:Q version@8:I sb_bytes@12:I total_bytes@16:Q uuid@24:16s max_hosts@40:I "
        "host_slot_bytes@44:I levels@48:I bucket_slots@52:I level_buckets0@56:I "
        "level_buckets1@60:I level_buckets2@64:I level_buckets3@68:I name_slots@88:Q "
        "max_objects@96:Q lease_slots@104:Q host_table_off@112:Q names_off@120:Q "
        "names_bytes@128:Q leases_off@136:Q leases_bytes@144:Q data_off@152:Q data_bytes@160:Q "
        "stripe_bytes@168:Q nbackings@176:I lease_timeout_ns@184:Q created_ns@192:q "
        "extent_bytes@200:Q nextents@208:Q extmap_off@216:Q extmap_bytes@224:Q claims_off@232:Q "
        "checksum@240:Q"),
    "slot_identity": _fields("tag@0:32s boot@32:Q heartbeat_ns@40:q epoch@48:Q lease_hwm@56:Q"),
    "slot_bakery": _fields("choosing@64:Q number@72:Q opener_pid@80:Q"),
    "slot_mutex": _fields("mutex0@128:Q mutex8@136:Q mutex16@144:Q mutex24@152:Q"),
    "slot_counters": _fields("used_bytes@192:Q free_bytes@200:Q nlive@208:Q ncreating@216:Q "
                             "ndead@224:Q next_gen@232:Q npending@240:I ncreating_list@244:I "
                             "ops@248:Q"),
    "slot_free_heads": _fields("free_head@256:Q"),      # [64]
    "slot_pending": _fields("pending@768:Q"),           # [128]
    "slot_creating": _fields("creating@1792:Q"),        # [288]
    "claim": _fields("x@0:Q door@64:Q"),
    "name_entry": _fields("hash@0:Q block@8:Q gen@16:Q seq@24:I state@28:I"),
    "lease": _fields("block@0:Q gen@8:Q pid@16:I obj_host@20:I"),
    "object_header": _fields("magic@0:I state@4:I block_bytes@8:Q prev_bytes@16:Q nbytes@24:Q "
                             "gen@32:Q checksum@40:Q created_ns@48:q creator_pid@56:I "
                             "name_len@60:H flags@62:H name@64:8s"),
    "free_block": _fields("magic@0:I state@4:I block_bytes@8:Q prev_bytes@16:Q next@64:Q "
                          "prev@72:Q"),
    "kv_block_header": _fields("magic@0:Q key@8:32s layout@40:32s image_bytes@72:Q "
                               "checksum@80:Q created_ns@88:q"),
    "kv_recency": _fields("magic@0:8s version@8:I host@12:I nslots@16:Q"),
    "ring_header": _fields("magic@0:Q version@8:I cell_bytes@12:I ncells@16:I cells_off@24:Q"),
    "ring_head": _fields("head@64:Q sleeping@72:I"),
    "ring_prod": _fields("closed@128:Q wake@136:I"),
    "ring_cell": _fields("stamp@0:Q nbytes@8:I kind@12:I"),
    "msg_hdr": _fields("ctx@16:I tag@20:i len@24:Q cookie@32:Q flags@40:I ncells@44:I "
                       "rdv_off@48:Q rdv_index@56:I"),    # after the 16-byte cell header
    "msg_short": _fields("ctx@16:I tag@20:i len@24:I flags@28:I cookie@32:Q crc@40:I"),
    "msg_rank": _fields("magic@0:Q version@8:I nranks@12:I rank@16:I host@20:I pid@24:Q "
                        "boot@32:Q session@40:Q domain@48:I beat@64:Q barrier@128:Q bwake@136:I "
                        "bsleep@140:I dir0@192:Q dir1@200:Q"),
    "msg_rdv": _fields("magic@0:Q cookie@8:Q ready@16:Q"),
    "msg_mem": _fields("magic@0:Q nbytes@8:Q"),
    "msg_win": _fields("magic@0:Q id@8:I rank@12:I nbytes@16:Q"),
    "rpc_srv": _fields("magic@0:Q max_clients@8:I slot_bytes@12:I depth@16:I host@20:I "
                       "pid@24:Q boot@32:Q"),
    "rpc_slot": _fields("id@16:Q method@24:I status@28:i"),  # after the cell header
}

# (C type, C member, base): offsetof(type, member) + base is the table's offset and the
# member's size the format's. None: the structure is Python's (checked against its Struct).
_P, _R, _M, _C = "cxk::pool::", "cxk::ring::", "cxk::msg::", "cxk::rpc::"
CSIDE: dict[str, dict[str, tuple[str, str, int]] | None] = {
    "superblock": {f: (_P + "Superblock", f.replace("level_buckets", "level_buckets["
                                                    ) + ("]" if "level_b" in f else ""), 0)
                   for f in STRUCTS["superblock"]},
    "slot_identity": {f: (_P + "HostSlot", f, 0) for f in STRUCTS["slot_identity"]},
    "slot_bakery": {f: (_P + "HostSlot", f, 0) for f in STRUCTS["slot_bakery"]},
    "slot_mutex": {"mutex0": (_P + "HostSlot", "mutex", 0)},  # words of the mutex: offset only
    "slot_counters": {f: (_P + "HostSlot", f, 0) for f in STRUCTS["slot_counters"]},
    "slot_free_heads": {"free_head": (_P + "HostSlot", "free_head[0]", 0)},
    "slot_pending": {"pending": (_P + "HostSlot", "pending[0]", 0)},
    "slot_creating": {"creating": (_P + "HostSlot", "creating[0]", 0)},
    "claim": {f: (_P + "SlotClaim", f, 0) for f in STRUCTS["claim"]},
    "name_entry": {f: (_P + "NameEntry", f, 0) for f in STRUCTS["name_entry"]},
    "lease": {f: (_P + "Lease", f, 0) for f in STRUCTS["lease"]},
    "object_header": {**{f: (_P + "ObjHeader", f, 0) for f in STRUCTS["object_header"]
                         if f != "name"}},
    "free_block": {**{f: (_P + "ObjHeader", f, 0) for f in ("magic", "state", "block_bytes",
                                                             "prev_bytes")},
                   "next": (_P + "ObjHeader", "link.next", 0),
                   "prev": (_P + "ObjHeader", "link.prev", 0)},
    "kv_block_header": {f: ("cxk_kv_block_hdr", f, 0) for f in STRUCTS["kv_block_header"]},
    "kv_recency": None,
    "ring_header": {f: (_R + "Header", f, 0) for f in STRUCTS["ring_header"]},
    "ring_head": {f: (_R + "HeadLine", f, 64) for f in STRUCTS["ring_head"]},
    "ring_prod": {f: (_R + "ProdLine", f, 128) for f in STRUCTS["ring_prod"]},
    "ring_cell": {f: (_R + "CellHdr", f, 0) for f in STRUCTS["ring_cell"]},
    "msg_hdr": {f: (_M + "MsgHdr", f, 16) for f in STRUCTS["msg_hdr"]},
    "msg_short": {f: (_M + "ShortHdr", f, 16) for f in STRUCTS["msg_short"]},
    "msg_rank": {**{f: (_M + "RankHdr", f, 0) for f in ("magic", "version", "nranks", "rank",
                                                         "host", "pid", "boot", "session",
                                                         "domain")},
                 "beat": (_M + "RankLive", "beat", 64),
                 **{f: (_M + "RankSeq", f, 128) for f in ("barrier", "bwake", "bsleep")}},
    "msg_rdv": {f: (_M + "RdvHdr", f, 0) for f in STRUCTS["msg_rdv"]},
    "msg_mem": {f: (_M + "MemHdr", f, 0) for f in STRUCTS["msg_mem"]},
    "msg_win": {f: (_M + "WinHdr", f, 0) for f in STRUCTS["msg_win"]},
    "rpc_srv": {f: (_C + "SrvHdr", f, 0) for f in STRUCTS["rpc_srv"]},
    "rpc_slot": {f: (_C + "SlotHdr", f, 16) for f in STRUCTS["rpc_slot"]},
}

CONSTANTS = {  # name -> (value here, C expression)
    "SB_CHECKSUM": (240, "offsetof(cxk::pool::Superblock, checksum)"),
    "HOST_SLOT": (4096, "sizeof(cxk::pool::HostSlot)"),
    "OBJ_HDR": (320, "sizeof(cxk::pool::ObjHeader)"),
    "RING_HDR": (192, "CXK_RING_HDR_BYTES"),
    "KV_HDR": (128, "CXK_KV_HDR_BYTES"),
    "RANK_DIR": (192, "cxk::msg::kDirOff"),
    "CELL_HDR": (16, "cxk::ring::kCellHdr"),
    "OBJ_MAGIC": (0x4F4B5843, "cxk::pool::kObjMagic"),
    "RING_MAGIC": (0x31474E49524B5843, "cxk::ring::kMagic"),
    "RANK_MAGIC": (0x314B4E41524B5843, "cxk::msg::kRankMagic"),
    "RDV_MAGIC": (0x31564452584B5843, "cxk::msg::kRdvMagic"),
    "SRV_MAGIC": (0x3156525343505243, "cxk::rpc::kSrvMagic"),
    "MSG_KIND_SHORT": (9, "(unsigned long long)cxk::msg::kShort"),
}
WORDS_OF = {("slot_mutex", "mutex0")}  # a word of a larger C member: its size is not checked
SB_CHECKSUM = CONSTANTS["SB_CHECKSUM"][0]
HOST_SLOT = CONSTANTS["HOST_SLOT"][0]
OBJ_HDR = CONSTANTS["OBJ_HDR"][0]
RING_HDR = CONSTANTS["RING_HDR"][0]
CELL_HDR = CONSTANTS["CELL_HDR"][0]
MSG_KIND_SHORT = CONSTANTS["MSG_KIND_SHORT"][0]
ARRAYS = {"slot_free_heads": 64, "slot_pending": 128, "slot_creating": 288}


def size_of(fmt: str) -> int:
    return struct.calcsize(fmt)


def c_program(win_hdr_source: str) -> str:
    """A C++ program printing 'struct field offset size' for every CSIDE entry and 'const
    name value' for every CONSTANTS entry (win_hdr_source: win.cpp's WinHdr definition)."""
    lines = ['#include <cstddef>', '#include <cstdio>', '#include "pool/format.h"',
             '#include "ring/ring.h"', '#include "msg/msg.h"', '#include "rpc/rpc.h"',
             '#include "cxlkit.h"', "namespace cxk::msg {", win_hdr_source, "}",
             "int main() {"]
    for sname, fields in CSIDE.items():
        for fname, (ctype, member, base) in (fields or {}).items():
            size_expr = f"sizeof((({ctype} *)0)->{member})"
            lines.append(f'  std::printf("%s %s %zu %zu\\n", "{sname}", "{fname}", '
                         f"offsetof({ctype}, {member}) + {base}, {size_expr});")
    for name, (_, expr) in CONSTANTS.items():
        lines.append(f'  std::printf("const %s %llu\\n", "{name}", '
                     f"(unsigned long long)({expr}));")
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"
