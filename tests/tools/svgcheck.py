#!/usr/bin/env python3
"""Reads what lockrunctl timeline drew, for tests/31-timeline.bats.

    svgcheck.py svg FILE.svg   one line per fact, "key value", from the SVG
                               parsed as XML: grants, waits, each class's
                               count, lanes per resource, the grant ids of
                               the hover texts, scripts and external
                               references (there must be none)
    svgcheck.py png FILE.png RRGGBB...
                               the screenshot's size, its pixels that are
                               not white, and the pixels of each colour

Only the standard library: the PNG decoder handles what Chromium writes
(8-bit RGB or RGBA, not interlaced).
"""
import re
import struct
import sys
import xml.etree.ElementTree as ET
import zlib

NS = "{http://www.w3.org/2000/svg}"


def svg(path):
    root = ET.parse(path).getroot()
    if root.tag != NS + "svg":
        sys.exit("not an SVG document: " + root.tag)
    facts = {"grants": 0, "waits": 0, "scripts": 0, "external": 0}
    lanes = {}
    ids = []
    for el in root.iter():
        if el.tag in (NS + "script", NS + "foreignObject", NS + "image"):
            facts["scripts"] += 1
        for k, v in el.attrib.items():
            if k.endswith("href") or "url(" in v or k.startswith("on"):
                facts["external"] += 1
    for g in root.iter(NS + "g"):
        cls = g.get("class", "").split()
        if "grant" not in cls:
            continue
        facts["grants"] += 1
        for c in cls[1:]:
            facts["class_" + c] = facts.get("class_" + c, 0) + 1
        if g.find(NS + "rect[@class='wait']") is not None:
            facts["waits"] += 1
        hold = g.find(NS + "rect[@class='hold']")
        title = hold.find(NS + "title").text
        m = re.match(r"grant (\d+): (\S+) \(", title)
        ids.append(m.group(1))
        lanes.setdefault(m.group(2), set()).add(hold.get("y"))
    for k in sorted(facts):
        print(k, facts[k])
    for r in sorted(lanes):
        print("lanes_" + r, len(lanes[r]))
    print("ids", " ".join(sorted(ids, key=int)))


def png(path, colours):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit("not a PNG file")
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, inter = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    if depth != 8 or ctype not in (2, 6) or inter:
        sys.exit("unsupported PNG: depth %d, colour type %d" % (depth, ctype))
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    counts = {c.lower(): 0 for c in colours}
    other = 0
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pr) & 255
        for x in range(w):
            px = line[x * bpp:x * bpp + 3]
            hexc = "%02x%02x%02x" % (px[0], px[1], px[2])
            if hexc != "ffffff":
                other += 1
            if hexc in counts:
                counts[hexc] += 1
        prev = line
    print("size %dx%d" % (w, h))
    print("not_white", other)
    for c in colours:
        print("colour_" + c.lower(), counts[c.lower()])


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "svg":
        svg(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "png":
        png(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
