#!/usr/bin/python3
"""Tiny authoritative for example.com that logs every query (for the ASAP design study).
policy: nx  -> NXDOMAIN for names it does not know (partial CI names included)
        ent -> NOERROR/NODATA for names under www.example.com (empty non-terminals)"""
import socket, struct, sys
addr, port, policy, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((addr, port))
def qname(b, o):
    labels = []
    while b[o]:
        n = b[o]; labels.append(b[o+1:o+1+n].decode()); o += 1 + n
    return ".".join(labels), o + 1
SOA = b"\xc0\x0c"  # unused
with open(log, "a", buffering=1) as L:
    while True:
        d, peer = s.recvfrom(4096)
        qid, flags, qd = struct.unpack(">HHH", d[:6])
        name, o = qname(d, 12); qtype, qclass = struct.unpack(">HH", d[o:o+4]); qend = o + 4
        L.write(f"{len(d)} {qtype} {name}\n")
        low = name.lower()
        ans = b""; rcode = 0; an = 0
        if low in ("www.example.com", "example.com") or low.startswith("zq."):
            if qtype == 1:
                ans = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0 if low.startswith("zq.") else 300, 4) + bytes([192, 0, 2, 1]); an = 1
            elif qtype == 16 and low.startswith("zq."):
                txt = b"x" * 200
                ans = b"\xc0\x0c" + struct.pack(">HHIH", 16, 1, 0, len(txt) + 1) + bytes([len(txt)]) + txt; an = 1
        elif low.endswith(".www.example.com") and policy == "ent":
            rcode = 0
        else:
            rcode = 3
        hdr = struct.pack(">HHHHHH", qid, 0x8400 | rcode, 1, an, 0, 0)
        s.sendto(hdr + d[12:qend] + ans, peer)
