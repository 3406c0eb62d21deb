// The guest half of the workspace store (workspace-snapshots.ts): a Python program the daemon runs
// in the guest with `python3 -c` (the agent needs Python, so every guest has it). It keeps
// snapshots of the workspace as commits in a bare git repository, makes patches between them, and
// moves snapshots between guests as git bundles. It prints one line, `PI_SANDBOX_STORE <json>`.

/** What the program's last stdout line starts with; the JSON after it is its answer. */
export const STORE_ANSWER_MARK = "PI_SANDBOX_STORE ";

/**
 * The program. Run one at a time per store (flock on `<store>.lock`); git runs with no system or
 * global config, no hooks, no filters or diff drivers; a changed file whose content (either side)
 * is not printable UTF-8 text is diffed as binary, so the patch itself is printable text.
 */
export const WORKSPACE_STORE_PROGRAM = String.raw`# pi-sandbox workspace store (see workspace-snapshots.ts); run as python3 -c PROGRAM OP JSON.
import fcntl, json, os, re, shutil, stat, subprocess, sys

MARK = "PI_SANDBOX_STORE "
INDEX = "pi-sandbox-index"
PATCH = "pi-sandbox.patch"
# A snapshot is a commit of its tree alone, with a fixed identity and date: the same workspace
# gives the same commit id, in this guest and in any other.
IDENTITY = {
    "GIT_AUTHOR_NAME": "pi-sandbox",
    "GIT_AUTHOR_EMAIL": "pi-sandbox@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "pi-sandbox",
    "GIT_COMMITTER_EMAIL": "pi-sandbox@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
# Whatever the store's config says: no hooks, no external tools, bytes as they are.
CONFIG = [
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.autocrlf=false", "core.safecrlf=false",
    "core.symlinks=true", "core.fileMode=true", "core.quotePath=true", "core.ignoreCase=false",
    "diff.noprefix=false", "diff.mnemonicPrefix=false", "diff.relative=false", "diff.suppressBlankEmpty=false",
    "diff.renames=true", "color.ui=never", "advice.addEmbeddedRepo=false", "gc.auto=0", "maintenance.auto=false",
]
# Read before the workspace's own .gitattributes: its bytes go in as they are (no filters, no
# line-ending changes) and no diff driver of its choosing runs; each line after it makes one path binary.
ATTRIBUTES = "* -text -filter -ident !eol !working-tree-encoding !diff\n"
TEXT_MAX = 8 << 20
# How many of a snapshot's left-out files its answer names (its commit names them all).
LEFT_OUT_SHOWN = 100
LEFT_OUT_HEAD = "left out, over %d bytes:"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
REF = re.compile(r"^refs/pi-sandbox/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
SHA = re.compile(r"^[0-9a-f]{40}$")


class Fail(Exception):
    def __init__(self, code, detail=""):
        Exception.__init__(self, code)
        self.code = code
        self.detail = detail


def git(store, args, work=None, config=(), stdin=None, check=True, index=INDEX):
    env = {
        "PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
        "HOME": store,
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_DIR": store,
        "GIT_INDEX_FILE": os.path.join(store, index),
    }
    env.update(IDENTITY)
    if work is not None:
        env["GIT_WORK_TREE"] = work
    command = ["git"]
    for item in list(CONFIG) + list(config):
        command += ["-c", item]
    done = subprocess.run(command + list(args), cwd=work or store, env=env, input=stdin,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and done.returncode != 0:
        raise Fail("git-failed", "git %s: %s" % (args[0], done.stderr.decode("utf-8", "replace")[-2000:]))
    return done


def commit_of(store, name):
    if not (REF.match(name) or SHA.match(name)):
        raise Fail("bad-argument", "not a store ref: %r" % name)
    done = git(store, ["rev-parse", "--verify", "-q", name + "^{commit}"], check=False)
    text = done.stdout.decode().strip()
    return text if done.returncode == 0 and SHA.match(text) else None


def write_attributes(store, binary):
    lines = [ATTRIBUTES]
    for path in binary:
        glob = re.sub(r"([\\*?\[])", r"\\\1", path)
        quoted = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\" + c if c in '"\\' else
                         "".join("\\%03o" % b for b in c.encode("utf-8")) for c in "/" + glob)
        lines.append('"%s" -diff\n' % quoted)
    with open(os.path.join(store, "info", "attributes"), "w") as f:
        f.write("".join(lines))


def init(store):
    if os.path.isfile(os.path.join(store, "HEAD")):
        return
    temp = "%s.new-%d" % (store, os.getpid())
    shutil.rmtree(temp, ignore_errors=True)
    done = subprocess.run(["git", "init", "-q", "--bare", temp], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env={"PATH": os.environ.get("PATH") or "/usr/bin:/bin", "HOME": "/",
                               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"})
    if done.returncode != 0:
        raise Fail("git-failed", "git init: " + done.stderr.decode("utf-8", "replace")[-2000:])
    os.makedirs(os.path.join(temp, "info"), exist_ok=True)
    with open(os.path.join(temp, "info", "exclude"), "w") as f:
        f.write("# left out of pi-sandbox's workspace snapshots\nnode_modules/\n")
    os.rename(temp, store)


def clear_stale_locks(store):
    # Only one of us runs at a time (the flock): a git lock file left now is a killed run's.
    for name in (INDEX + ".lock", "packed-refs.lock", "HEAD.lock"):
        try:
            os.unlink(os.path.join(store, name))
        except FileNotFoundError:
            pass
    for root, _dirs, files in os.walk(os.path.join(store, "refs")):
        for name in files:
            if name.endswith(".lock"):
                os.unlink(os.path.join(root, name))


def over_limit(store, work, config, limit):
    # The files add -A would record that are larger than limit bytes: untracked ones (not ignored)
    # and tracked ones whose stat changed; only these are stat-ed, nothing is read. The index never
    # keeps a large file (see snapshot), so one is untracked, and found again, at every snapshot.
    listed = git(store, ["ls-files", "-z", "--others", "--modified", "--exclude-standard"], work=work,
                 config=config).stdout
    found = []
    for name in set(listed.split(b"\0")):
        if not name:
            continue
        try:
            info = os.lstat(os.path.join(os.fsencode(work), name))
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            found.append(name)
    return sorted(found)


def snapshot(store, work, limit, ref=None, full=False):
    # Files larger than limit bytes are hashed only when full: a snapshot that is not (a checkpoint's)
    # leaves them out and names them in its commit's message. The store's index never keeps them,
    # so the next snapshot does not read them either.
    if not os.path.isdir(work):
        raise Fail("no-workspace", work)
    write_attributes(store, [])
    config = []
    own = os.path.join(work, ".git", "info", "exclude")
    if os.path.isfile(own):
        config.append("core.excludesFile=" + own)
    large = over_limit(store, work, config, limit)
    # A file that vanishes or cannot be read while a build runs is left out, not the whole snapshot.
    spec = b"\0".join([b"."] + [b":(exclude,literal)" + name for name in large]) + b"\0"
    git(store, ["add", "-A", "--ignore-errors", "--pathspec-from-file=-", "--pathspec-file-nul"], work=work,
        config=config, stdin=spec, check=False)
    listed = git(store, ["ls-files", "-s", "-z"]).stdout.split(b"\0")
    nested = [entry.split(b"\t", 1)[1] for entry in listed if entry.startswith(b"160000 ")]
    # Another repository inside the workspace: its files are its own, a commit id here says nothing.
    # A large file the index held (it was small then) goes too.
    removed = nested + large
    if removed:
        git(store, ["update-index", "--force-remove", "-z", "--stdin"], work=work, stdin=b"\0".join(removed) + b"\0")
    index = INDEX
    if full and large:
        # The large files too, through a copy of the index: hashed now, not kept for the next one.
        index = INDEX + ".full"
        shutil.copyfile(os.path.join(store, INDEX), os.path.join(store, index))
        git(store, ["add", "--ignore-errors", "--pathspec-from-file=-", "--pathspec-file-nul"], work=work,
            config=config, stdin=b"".join(b":(literal)" + name + b"\0" for name in large), check=False, index=index)
    try:
        tree = git(store, ["write-tree"], index=index).stdout.decode().strip()
    finally:
        if index != INDEX:
            os.unlink(os.path.join(store, index))
    left = [] if full else large
    message = "pi-sandbox workspace snapshot\n"
    if left:
        message += "\n" + LEFT_OUT_HEAD % limit + "\n"
        message += "".join(json.dumps(name.decode("utf-8", "surrogateescape")) + "\n" for name in left)
    commit = git(store, ["commit-tree", tree, "-F", "-"], stdin=message.encode()).stdout.decode().strip()
    if ref is not None:
        git(store, ["update-ref", ref, commit])
    return commit, [name.decode("utf-8", "surrogateescape") for name in left]


def left_out_of(store, commit):
    # The files a snapshot left out, as its message names them.
    body = git(store, ["cat-file", "commit", commit]).stdout.decode("utf-8", "surrogateescape")
    lines = body.split("\n\n", 1)[-1].split("\n")
    names = []
    for i, line in enumerate(lines):
        if re.match(r"^left out, over \d+ bytes:$", line):
            names = [json.loads(item) for item in lines[i + 1:] if item.startswith('"')]
    return names


def file_max(args):
    limit = args.get("fileMax")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise Fail("bad-argument", "not a size: %r" % (limit,))
    return limit


def shown(names):
    return {"leftOut": names[:LEFT_OUT_SHOWN], "leftOutCount": len(names)}


def printable(data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return CONTROL.search(text.replace("\r\n", "\n")) is None


def binary_paths(store, base, commit, spec):
    raw = git(store, ["diff", "--raw", "-z", "--no-renames", "--no-abbrev", base, commit, "--"] + spec).stdout
    fields = raw.split(b"\0")
    changed = []
    i = 0
    while i + 1 < len(fields) and fields[i].startswith(b":"):
        meta = fields[i][1:].decode().split(" ")
        path = fields[i + 1].decode("utf-8", "surrogateescape")
        changed.append((path, [(meta[0], meta[2]), (meta[1], meta[3])]))
        i += 2
    shas = set()
    for _path, sides in changed:
        for mode, sha in sides:
            if mode in ("100644", "100755", "120000") and sha != "0" * 40:
                shas.add(sha)
    text = {}
    if shas:
        cat = subprocess.Popen(["git", "cat-file", "--batch"], cwd=store, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env={"PATH": os.environ.get("PATH") or "/usr/bin:/bin",
                                                            "GIT_DIR": store, "GIT_CONFIG_NOSYSTEM": "1",
                                                            "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": store})
        sizes = git(store, ["cat-file", "--batch-check=%(objectname) %(objectsize)"],
                    stdin="".join(s + "\n" for s in shas).encode()).stdout.decode().split("\n")
        for line in sizes:
            if not line:
                continue
            sha, size = line.split(" ")
            if int(size) > TEXT_MAX:
                text[sha] = False
                continue
            cat.stdin.write((sha + "\n").encode())
            cat.stdin.flush()
            header = cat.stdout.readline().split(b" ")
            length = int(header[2])
            data = cat.stdout.read(length + 1)[:length]
            text[sha] = printable(data)
        cat.stdin.close()
        cat.wait()
    return [path for path, sides in changed if any(text.get(sha) is False for _mode, sha in sides)]


def op_snapshot(store, args):
    ref = args.get("ref")
    if ref is not None and not REF.match(ref):
        raise Fail("bad-argument", "not a store ref: %r" % ref)
    commit, left = snapshot(store, args["workspace"], file_max(args), ref, full=args.get("full") is True)
    return dict(shown(left), commit=commit)


def op_resolve(store, args):
    return {"commit": commit_of(store, args["ref"])}


def without(store, work, commit, names):
    # The tree of commit without names: what a base that left them out is compared with.
    index = INDEX + ".compare"
    try:
        git(store, ["read-tree", commit], index=index)
        listed = b"".join(os.fsencode(name) + b"\0" for name in names)
        git(store, ["update-index", "--force-remove", "-z", "--stdin"], work=work, stdin=listed, index=index)
        return git(store, ["write-tree"], index=index).stdout.decode().strip()
    finally:
        try:
            os.unlink(os.path.join(store, index))
        except FileNotFoundError:
            pass


def op_diff(store, args):
    base = commit_of(store, args["base"])
    if base is None:
        raise Fail("no-base", args["base"])
    work = args["workspace"]
    commit, _left = snapshot(store, work, file_max(args), full=True)
    path = args.get("path")
    spec = [":(literal)" + path] if path else []
    # What the base left out (a checkpoint's large files) has no side to compare: left out here too.
    left = [name for name in left_out_of(store, base) if not path or name == path or name.startswith(path + "/")]
    compared = without(store, work, commit, left) if left else commit
    binary = binary_paths(store, base, compared, spec)
    write_attributes(store, binary)
    out = os.path.join(store, PATCH)
    with open(out, "wb") as f:
        patch = git(store, ["diff", "--binary", "-M", "--full-index", "--no-ext-diff", "--no-textconv", "--no-color",
                            "--src-prefix=a/", "--dst-prefix=b/", base, compared, "--"] + spec, work=work).stdout
        f.write(patch)
    write_attributes(store, [])
    return dict(shown(left), commit=commit, base=base, patch=out, bytes=len(patch), binary=len(binary))


def op_bundle(store, args):
    commit, _left = snapshot(store, args["workspace"], file_max(args), "refs/pi-sandbox/export", full=True)
    known = args.get("known")
    known = commit_of(store, known) if known else None
    if known == commit:
        return {"commit": commit, "bundle": None}
    out = os.path.join(store, "export.bundle")
    git(store, ["bundle", "create", "-q", out, "refs/pi-sandbox/export"] + (["^" + known] if known else []))
    return {"commit": commit, "bundle": out, "bytes": os.path.getsize(out)}


def op_fetch(store, args):
    bundle, ref = args["bundle"], args["ref"]
    if not REF.match(ref):
        raise Fail("bad-argument", "not a store ref: %r" % ref)
    try:
        git(store, ["fetch", "-q", "--no-tags", "--no-write-fetch-head", bundle, "+refs/pi-sandbox/export:" + ref])
    finally:
        try:
            os.unlink(bundle)
        except FileNotFoundError:
            pass
    return {"commit": commit_of(store, ref)}


OPS = {"snapshot": op_snapshot, "resolve": op_resolve, "diff": op_diff, "bundle": op_bundle, "fetch": op_fetch}


def main():
    op, args = sys.argv[1], json.loads(sys.argv[2])
    try:
        if shutil.which("git") is None:
            raise Fail("no-git")
        store = args["store"]
        os.makedirs(os.path.dirname(store), mode=0o700, exist_ok=True)
        with open(store + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            init(store)
            clear_stale_locks(store)
            result = OPS[op](store, args)
        sys.stdout.write(MARK + json.dumps(dict(result, ok=True)) + "\n")
    except Fail as failure:
        sys.stdout.write(MARK + json.dumps({"ok": False, "error": failure.code, "detail": failure.detail}) + "\n")
        sys.exit(1)


main()
`;
