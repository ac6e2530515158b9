#!/usr/bin/env python3
"""numdiff.py A B: compare two output trees file by file. A file passes if it is
byte-identical, or if it differs only in numbers within 1e-9 relative (sums
added in another order). Exits 1 if any file differs otherwise or is missing."""
import os, re, sys
num = re.compile(r'-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?')
a, b = sys.argv[1], sys.argv[2]
same = close = 0; bad = []
for root, _, files in os.walk(a):
    for f in files:
        pa = os.path.join(root, f); pb = os.path.join(b, os.path.relpath(pa, a))
        if not os.path.exists(pb): bad.append(('missing', pb)); continue
        ta, tb = open(pa, 'rb').read(), open(pb, 'rb').read()
        if ta == tb: same += 1; continue
        try: sa, sb = ta.decode(), tb.decode()
        except UnicodeDecodeError: bad.append(('binary', pa)); continue
        if num.sub('#', sa) != num.sub('#', sb): bad.append(('text', pa)); continue
        ok = True; worst = 0
        for x, y in zip(num.findall(sa), num.findall(sb)):
            if x == y: continue
            fx, fy = float(x), float(y)
            d = abs(fx - fy) / max(abs(fx), abs(fy), 1e-300)
            worst = max(worst, d)
            if d > 1e-9: ok = False
        if ok: close += 1; print(f'close {pa} worst {worst:.2e}')
        else: bad.append((f'numbers {worst:.2e}', pa))
for root, _, files in os.walk(b):
    for f in files:
        pb = os.path.join(root, f)
        if not os.path.exists(os.path.join(a, os.path.relpath(pb, b))): bad.append(('extra', pb))
print(f'{same} identical, {close} equal within 1e-9, {len(bad)} different')
for k, p in bad: print(k, p)
sys.exit(1 if bad else 0)
