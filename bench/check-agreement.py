#!/usr/bin/env python3
"""Agreement of `xfswin check` with `xfs_repair -n` on damaged images (see bench/check-agreement.sh).

Damage: xfs_db 6.13 `fuzz -d FIELD VERB` (the field changed, the block's CRC recomputed; three of the eight verbs per
field, rotating, so that every verb meets every kind of field; of arrays the first, middle and last element) on every field of the
superblocks, AG headers, AGFL, the root block of every AG btree, inodes of each format, directory blocks of each
form, attribute blocks, an extent btree block and remote symlink and attribute blocks; and `blocktrash` with fixed
seeds. Each case starts from the same base image: the block xfs_db changes is saved first and written back after
(blocktrash cases work on a copy). Both tools only read. Verdicts: xfs_repair -n's exit status (0 clean, 1 damage
found) and what `xfswin check` decides, through the same VolumeChecker run in one long-lived judge process per job
(XfsWin.Benchmarks check-judge): clean, problems found or a refusal (flagged), a crash (any exception but XfsWin's
own) and a hang (no answer within --timeout seconds).

Deterministic: the cases are derived from the images in a fixed order; xfs_db's `random` verb draws from an
unseeded generator in a fresh process; blocktrash takes its seed. Output: a summary table per structure and, in
--out DIR, cases.jsonl with every case and disagreements.txt with the commands that reproduce each disagreement.
"""
import argparse
import concurrent.futures as cf
import hashlib
import json
import select
import os
import re
import shutil
import subprocess
import sys
import threading
import time

VERBS = ["zeroes", "ones", "firstbit", "middlebit", "lastbit", "add", "sub", "random"]


# Inode fields fuzzed on every inode chosen; the others (all of them) on the first two only.
INODE_FOCUS = re.compile(r"^(core\.(mode|format|size|nblocks|nextents|naextents|big_nextents|big_naextents|forkoff|aformat|"
                         r"nlinkv2|onlink|version|flags2|realtime|extsize)|next_unlinked|v3\.(flags2|inumber|reflink|nrext64)|u3?\.|a\.)")


def run(args, timeout=None, input_bytes=None):
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, input=input_bytes)


class Judge:
    """One long-lived `XfsWin.Benchmarks check-judge` process (VolumeChecker in process: no start-up per case)."""

    def __init__(self, command, timeout):
        self.command = command
        self.timeout = timeout
        self.proc = None

    def _start(self):
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     bufsize=0)

    def check(self, image):
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.proc.stdin.write((image + "\n").encode())
        self.proc.stdin.flush()
        line = b""
        deadline = time.time() + self.timeout
        while not line.endswith(b"\n"):
            left = deadline - time.time()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0, left))
            if not ready:
                self.close()
                return "hang", ""
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                self.close()
                return "crash", "the judge process died"
            line += chunk
        text = line.decode("utf-8", "replace").strip()
        kind = text.split(" ", 1)[0]
        return {"clean": "clean", "flagged": "flagged", "refused": "flagged", "crash": "crash"}.get(kind, "crash"), text

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class Tools:
    def __init__(self, xfsprogs, judge_command, timeout):
        self.db = os.path.join(xfsprogs, "xfs_db")
        self.repair = os.path.join(xfsprogs, "xfs_repair")
        self.judge_command = judge_command
        self.timeout = timeout

    def db_read(self, image, commands):
        args = [self.db, "-r"]
        for c in commands:
            args += ["-c", c]
        return run(args + [image], timeout=120).stdout.decode("utf-8", "replace")

    def db_write(self, image, commands):
        args = [self.db, "-x"]
        for c in commands:
            args += ["-c", c]
        r = run(args + [image], timeout=120)
        return (r.stdout + r.stderr).decode("utf-8", "replace")


def expand_fields(printed):
    """Fields of one xfs_db `print`, arrays reduced to their first, middle and last element."""
    fields = []
    lines = printed.split("\n")
    for line in lines:
        m = re.match(r"^(\S+) = (.*)$", line)
        if not m:
            continue
        name, value = m.group(1), m.group(2)
        arr = re.match(r"^(.*)\[(\d+)-(\d+)\]$", name)
        if arr:
            base, lo, hi = arr.group(1), int(arr.group(2)), int(arr.group(3))
            picks = sorted({lo, (lo + hi) // 2, hi})
            sub = re.match(r"^\[([^\]]*)\]", value.strip())
            for i in picks:
                if sub:
                    for s in sub.group(1).split(","):
                        fields.append(f"{base}[{i}].{s}")
                else:
                    fields.append(f"{base}[{i}]")
            continue
        if name.endswith("crc") or ".crc" in name:
            continue  # fuzz -d recomputes it
        fields.append(name)
    # Keep the order, drop repeats; of elements listed one by one (X[3].y), keep the first, middle and last index.
    seen = set()
    fields = [f for f in fields if not (f in seen or seen.add(f))]
    indexes = {}
    for f in fields:
        for m in re.finditer(r"^(.*?)\[(\d+)\]", f):
            indexes.setdefault(m.group(1), set()).add(int(m.group(2)))
    keep = {}
    for base, ix in indexes.items():
        ix = sorted(ix)
        keep[base] = {ix[0], ix[len(ix) // 2], ix[-1]}
    out = []
    for f in fields:
        m = re.match(r"^(.*?)\[(\d+)\]", f)
        if m and int(m.group(2)) not in keep[m.group(1)]:
            continue
        out.append(f)
    return out


def buffer_of(stack_text):
    m = re.search(r"buffer block (\d+) \(fsbno \d+\), (\d+) bbs?", stack_text)
    if not m:
        m2 = re.search(r"byte offset (\d+), length (\d+)", stack_text)
        if not m2:
            return None
        return int(m2.group(1)), int(m2.group(2))
    return int(m.group(1)) * 512, int(m.group(2)) * 512


def positions(tools, image, features):
    """(structure name, xfs_db position commands) to fuzz on this image."""
    out = [("superblock 0", ["sb 0"]), ("superblock 1", ["sb 1"]), ("AGF", ["agf 1"]), ("AGI", ["agi 1"]), ("AGFL", ["agfl 0"]),
           ("bnobt", ["agf 0", "addr bnoroot"]), ("cntbt", ["agf 0", "addr cntroot"]), ("inobt", ["agi 0", "addr root"])]
    if features["finobt"]:
        out.append(("finobt", ["agi 0", "addr free_root"]))
    if features["rmapbt"]:
        out.append(("rmapbt", ["agf 1", "addr rmaproot"]))
    if features["reflink"]:
        out.append(("refcountbt", ["agf 1", "addr refcntroot"]))
    inodes = [("inode: directory (short form)", "/dirs/shortform"), ("inode: regular file (extents)", "/files/size-65537"),
              ("inode: directory (block)", "/dirs/block"), ("inode: directory (leaf)", "/dirs/leaf"), ("inode: directory (node)", "/dirs/node"),
              ("inode: file (extent btree)", "/extents/many-extents"), ("inode: symlink (local)", "/symlinks/short"),
              ("inode: symlink (remote)", "/symlinks/remote-1000"), ("inode: device", "/special/null"),
              ("inode: attributes (short form)", "/xattrs/shortform"), ("inode: attributes (leaf)", "/xattrs/leaf"),
              ("inode: attributes (node)", "/xattrs/node"), ("inode: preallocated", "/sparse/prealloc")]
    if features["reflink"]:
        inodes.append(("inode: reflinked file", "/reflink/clone"))
    for name, path in inodes:
        out.append((name, [f"path {path}"]))
    dirblk = features["dirblklog"]
    leaf = (32 << 30) // features["blocksize"]
    free = (64 << 30) // features["blocksize"]
    out += [("directory block (block form)", ["path /dirs/block", "dblock 0"]),
            ("directory data block (leaf form)", ["path /dirs/leaf", "dblock 0"]),
            ("directory leaf block (leaf form)", ["path /dirs/leaf", f"dblock {leaf}"]),
            ("directory data block (node form)", ["path /dirs/node", f"dblock {1 << dirblk}"]),
            ("directory da node block", ["path /dirs/node", f"dblock {leaf}"]),
            ("directory free index block", ["path /dirs/node", f"dblock {free}"])]
    node = tools.db_read(image, ["path /dirs/node", f"dblock {leaf}", "print btree[0].before"])
    m = re.search(r"btree\[0\]\.before = (\d+)", node)
    if m:
        out.append(("directory leaf block (node form)", ["path /dirs/node", f"dblock {m.group(1)}"]))
    out += [("attribute leaf block", ["path /xattrs/leaf", "ablock 0"]), ("attribute da node block", ["path /xattrs/node", "ablock 0"])]
    anode = tools.db_read(image, ["path /xattrs/node", "ablock 0", "print btree[0].before"])
    m = re.search(r"btree\[0\]\.before = (\d+)", anode)
    if m:
        out.append(("attribute leaf block (node form)", ["path /xattrs/node", f"ablock {m.group(1)}"]))
    rleaf = tools.db_read(image, ["path /xattrs/remote", "ablock 0", "print"])
    m = re.search(r"nvaluelist\[\d+\]\.valueblk = (?:0x)?([0-9a-f]+)", rleaf) or re.search(r"valueblk = (?:0x)?([0-9a-f]+)", rleaf)
    if m:
        out.append(("remote attribute value block", ["path /xattrs/remote", f"ablock {int(m.group(1), 16) if 'x' in m.group(0) else int(m.group(1))}"]))
    out.append(("remote symlink block", ["path /symlinks/remote-1000", "dblock 0"]))
    out.append(("extent btree block", ["path /extents/many-extents", "addr u3.bmbt.ptrs[1]"]))
    return out


def features_of(tools, image):
    sb = tools.db_read(image, ["sb 0", "print"])
    def field(name):
        m = re.search(rf"^{name} = (\S+)", sb, re.M)
        return m.group(1) if m else "0"
    ro = int(field("features_ro_compat"), 0)
    vn = int(field("versionnum"), 0)
    return {"v5": (vn & 0xF) == 5, "finobt": bool(ro & 1), "rmapbt": bool(ro & 2), "reflink": bool(ro & 4),
            "blocksize": int(field("blocksize")), "dirblklog": int(field("dirblklog"))}


def build_cases(tools, images):
    cases = []
    for name, image in images:
        feats = features_of(tools, image)
        for structure, pos in positions(tools, image, feats):
            printed = tools.db_read(image, pos + ["print"])
            if "= " not in printed or "no current type" in printed:
                continue
            fields = expand_fields(printed)
            if structure.startswith("inode") and structure not in ("inode: directory (short form)", "inode: regular file (extents)"):
                fields = [f for f in fields if INODE_FOCUS.match(f)]
            for i, f in enumerate(fields):
                # Three verbs per field, rotating through all eight: every verb reaches every kind of field.
                for k in range(3):
                    verb = VERBS[(i * 3 + k) % len(VERBS)]
                    cases.append({"image": name, "structure": structure, "position": pos, "field": f, "verb": verb})
    return cases


def blocktrash_cases(images, seeds):
    cases = []
    for name, _ in images:
        for seed in range(1, seeds + 1):
            cases.append({"image": name, "structure": "blocktrash", "seed": seed,
                          "how": ["-n", "1", "-2"] if name.startswith("v4") else ["-n", "3", "-2"]})
    return cases


def judge(tools, judge_proc, image):
    r = run([tools.repair, "-n", image], timeout=600)
    repair = "clean" if r.returncode == 0 else ("flagged" if r.returncode in (1, 2, 4) else f"exit {r.returncode}")
    ours, text = judge_proc.check(image)
    return repair, ours, text.split(" ", 1)[0], text


_buffers = {}


def run_fuzz_case(tools, judge_proc, workdir, case):
    image = os.path.join(workdir, case["image"] + ".img")
    key = (image, tuple(case["position"]))
    if key not in _buffers:
        _buffers[key] = buffer_of(tools.db_read(image, case["position"] + ["stack"]))
    buf = _buffers[key]
    if buf is None:
        return dict(case, result="skipped", why="no buffer")
    offset, length = buf
    with open(image, "rb") as f:
        f.seek(offset)
        saved = f.read(length)
    try:
        out = tools.db_write(image, case["position"] + [f"fuzz -d {case['field']} {case['verb']}"])
        with open(image, "rb") as f:
            f.seek(offset)
            now = f.read(length)
        if now == saved:
            return dict(case, result="unchanged", why=out.strip()[-200:])
        repair, ours, code, text = judge(tools, judge_proc, image)
        return dict(case, repair=repair, ours=ours, exit=code, result=verdict(repair, ours), detail=text[-2000:] if verdict(repair, ours) != "agree" else "")
    finally:
        with open(image, "r+b") as f:
            f.seek(offset)
            f.write(saved)


def run_trash_case(tools, judge_proc, workdir, base, case):
    image = os.path.join(workdir, f"trash-{case['image']}-{case['seed']}.img")
    shutil.copyfile(base, image)
    try:
        tools.db_write(image, ["blockget", "blocktrash " + " ".join(case["how"]) + f" -s {case['seed']}"])
        repair, ours, code, text = judge(tools, judge_proc, image)
        return dict(case, repair=repair, ours=ours, exit=code, result=verdict(repair, ours), detail=text[-2000:] if verdict(repair, ours) != "agree" else "")
    finally:
        os.remove(image)


def verdict(repair, ours):
    if ours in ("crash", "hang"):
        return ours
    if repair not in ("clean", "flagged"):
        return "repair-failed"
    if repair == ours:
        return "agree"
    return "false-negative" if repair == "flagged" else "false-positive"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", required=True, help="NAME=PATH,... base images (not changed)")
    ap.add_argument("--xfsprogs", required=True)
    ap.add_argument("--judge", required=True, help="the command of the in-process checker (XfsWin.Benchmarks check-judge)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--every", type=int, default=1, help="run every Nth fuzz case only (a deterministic sample)")
    ap.add_argument("--only", default="", help="run only structures whose name contains this")
    ap.add_argument("--count", action="store_true", help="list how many cases each structure has, run nothing")
    ap.add_argument("--rerun", default="", help="run again only the cases of an earlier cases.jsonl that did not agree")
    a = ap.parse_args()
    tools = Tools(a.xfsprogs, a.judge.split(" "), a.timeout)
    images = [tuple(x.split("=", 1)) for x in a.images.split(",")]
    os.makedirs(a.out, exist_ok=True)
    started = time.time()
    if a.rerun:
        with open(a.rerun) as f:
            earlier = [json.loads(line) for line in f]
        keep = ("image", "structure", "position", "field", "verb", "seed", "how")
        earlier = [{k: c[k] for k in keep if k in c} for c in earlier if c["result"] not in ("agree", "unchanged", "skipped")]
        fuzz = [c for c in earlier if c["structure"] != "blocktrash" and a.only in c["structure"]]
        trash = [c for c in earlier if c["structure"] == "blocktrash" and not a.only]
    else:
        fuzz = build_cases(tools, images)
        fuzz = [c for i, c in enumerate(fuzz) if i % a.every == 0 and a.only in c["structure"]]
        trash = [] if a.only else blocktrash_cases(images, a.seeds)
    print(f"{len(fuzz)} fuzz cases, {len(trash)} blocktrash cases, {a.jobs} jobs", flush=True)
    if a.count:
        counts = {}
        for c in fuzz:
            counts[c["structure"]] = counts.get(c["structure"], 0) + 1
        for k in sorted(counts):
            print(f"{k:42} {counts[k]}")
        return 0

    # One private copy of every image per job: fuzz cases change it and put it back.
    workdirs = []
    for j in range(a.jobs):
        d = os.path.join(a.out, f"job{j}")
        os.makedirs(d, exist_ok=True)
        for name, path in images:
            subprocess.run(["cp", "--sparse=always", path, os.path.join(d, name + ".img")], check=True)
        workdirs.append(d)
    by_job = [[] for _ in range(a.jobs)]
    for i, c in enumerate(fuzz):
        by_job[i % a.jobs].append(c)
    base = dict(images)

    done = [0]
    lock = threading.Lock()
    total_cases = len(fuzz) + len(trash)

    def tick():
        with lock:
            done[0] += 1
            if done[0] % 250 == 0:
                print(f"  {done[0]}/{total_cases} cases, {time.time() - started:.0f} s", flush=True)

    def worker(j):
        res = []
        judge_proc = Judge(tools.judge_command, tools.timeout)
        try:
            for c in by_job[j]:
                res.append(run_fuzz_case(tools, judge_proc, workdirs[j], c))
                tick()
            for i, c in enumerate(trash):
                if i % a.jobs == j:
                    res.append(run_trash_case(tools, judge_proc, workdirs[j], base[c["image"]], c))
                    tick()
        finally:
            judge_proc.close()
        return res

    results = []
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for r in ex.map(worker, range(a.jobs)):
            results += r
    for d in workdirs:
        shutil.rmtree(d)

    with open(os.path.join(a.out, "cases.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    kinds = ["agree", "false-negative", "false-positive", "crash", "hang", "repair-failed"]
    table = {}
    for r in results:
        if r["result"] in ("unchanged", "skipped"):
            continue
        row = table.setdefault(r["structure"], {k: 0 for k in kinds + ["flagged"]})
        row[r["result"]] += 1
        if r.get("repair") == "flagged":
            row["flagged"] += 1
    total = {k: sum(v[k] for v in table.values()) for k in kinds + ["flagged"]}
    print(f"\n{'structure':42} {'cases':>6} {'repair flags':>12} {'agree':>6} {'missed':>6} {'false+':>6} {'crash':>5} {'hang':>4}")
    for s in sorted(table):
        v = table[s]
        n = sum(v[k] for k in kinds)
        print(f"{s:42} {n:6} {v['flagged']:12} {v['agree']:6} {v['false-negative']:6} {v['false-positive']:6} {v['crash']:5} {v['hang']:4}")
    n = sum(total[k] for k in kinds)
    print(f"{'total':42} {n:6} {total['flagged']:12} {total['agree']:6} {total['false-negative']:6} {total['false-positive']:6} {total['crash']:5} {total['hang']:4}")
    unchanged = sum(1 for r in results if r["result"] == "unchanged")
    print(f"({unchanged} fuzz cases changed nothing and were not judged; {total['repair-failed']} xfs_repair failures; {time.time() - started:.0f} s)")
    with open(os.path.join(a.out, "disagreements.txt"), "w") as f:
        for r in results:
            if r["result"] in ("agree", "unchanged", "skipped"):
                continue
            if r["structure"] == "blocktrash":
                how = f"xfs_db -x -c blockget -c 'blocktrash {' '.join(r['how'])} -s {r['seed']}' IMAGE"
            else:
                how = "xfs_db -x " + " ".join(f"-c '{c}'" for c in r["position"] + [f"fuzz -d {r['field']} {r['verb']}"]) + " IMAGE"
            f.write(f"{r['result']}\t{r['image']}\t{r['structure']}\t{how}\trepair {r.get('repair')}, xfswin {r.get('ours')}\n")
            if r.get("detail"):
                f.write("\t" + r["detail"].replace("\n", "\n\t")[:1500] + "\n")
    return 1 if total["crash"] or total["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
