#!/usr/bin/env python3
"""How much of APISIX's documentation loads in Sluice.

Every admin-API request body in apache/apisix's docs/en/latest (`curl .../apisix/admin/<kind>
... -d '{...}'`) is turned into a Sluice file (the body as the only resource of its kind, the
resources it names as placeholders: an upstream for `upstream_id`, a service for `service_id`,
a secret manager for a `$secret://` reference, ...; stream routes get the node's `stream_proxy` ports of APISIX's example config, Eureka
upstreams its discovery.md's `discovery.eureka`) and checked
with `sluice validate`. Reports how many load, over all bodies and over those that use only
plugins Sluice has, and the errors of the others, most frequent first.

    bench/apisix_docs.py --apisix /path/to/apache/apisix [--sluice target/debug/sluice]

--apisix is a checkout or a bare git directory (the `fetch` tool's mirror). Spliced shell
values ('"$(cat cert.pem)"') become a test certificate or key, or a placeholder.
"""
import argparse, collections, json, os, re, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--apisix", required=True)
ap.add_argument("--sluice", default="target/debug/sluice")
ap.add_argument("--out", default=None, help="directory for the files and results.json")
args = ap.parse_args()

out = args.out or tempfile.mkdtemp(prefix="apisix-docs-")
os.makedirs(out, exist_ok=True)

def git(*a):
    return subprocess.run(["git", "-C", args.apisix, *a], capture_output=True, text=True).stdout

files = [f for f in git("ls-tree", "-r", "--name-only", "HEAD", "docs/en/latest").split() if f.endswith(".md")]

# A certificate and key for bodies that splice one in.
subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{out}/key.pem",
                "-out", f"{out}/cert.pem", "-days", "30", "-subj", "/CN=test.com",
                "-addext", "subjectAltName=DNS:test.com,DNS:*.test.com,DNS:localhost"],
               check=True, capture_output=True)
CERT, KEY = open(f"{out}/cert.pem").read(), open(f"{out}/key.pem").read()

bodies = []
for f in files:
    text = git("show", f"HEAD:{f}")
    for m in re.finditer(r"curl[^\n]*?(?:\"|')?(https?://[^\s\"']*/apisix/admin/[^\s\"'?]*)[^\n]*", text):
        fence = text.find("```", m.start())
        cmd = text[m.start():fence if fence > 0 else len(text)]
        meth = re.search(r"-X\s*'?\"?(PUT|POST|PATCH|GET|DELETE)", cmd)
        meth = meth.group(1) if meth else "PUT"
        if "-d '" not in cmd:
            continue
        rest, body = cmd[cmd.index("-d '") + 4:], ""
        while "'" in rest:
            i = rest.index("'")
            body, rest = body + rest[:i], rest[i + 1:]
            spliced = re.match(r'("[^"]*"|\$\{?\w+\}?)\'', rest)
            if not spliced:
                break
            inner = spliced.group(1)
            if ".key" in inner or ("key" in inner.lower() and "crt" not in inner):
                body += "@@KEY@@"
            elif "crt" in inner or "cert" in inner.lower() or "pem" in inner:
                body += "@@CERT@@"
            else:
                body += "@@VALUE@@"
            rest = rest[spliced.end():]
        try:
            value = json.loads(body)
        except ValueError:
            bodies.append({"file": f, "url": m.group(1), "method": meth, "error": "not JSON"})
            continue
        bodies.append({"file": f, "url": m.group(1), "method": meth, "body": value})

# The plugins the binary has (`sluice plugins`).
PLUGINS = {p["name"] for p in json.loads(subprocess.run([args.sluice, "plugins"], capture_output=True, text=True, check=True).stdout)}

def plugins_of(v, acc):
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "plugins" and isinstance(x, dict):
                acc.update(x.keys())
            plugins_of(x, acc)
    elif isinstance(v, list):
        for x in v:
            plugins_of(x, acc)
    return acc

def fill(v):
    if isinstance(v, str):
        return v.replace("@@CERT@@", CERT).replace("@@KEY@@", KEY).replace("@@VALUE@@", "value")
    if isinstance(v, dict):
        return {k: fill(x) for k, x in v.items()}
    if isinstance(v, list):
        return [fill(x) for x in v]
    return v

UP = {"nodes": {"127.0.0.1:1980": 1}}
results = []
for n, b in enumerate(bodies):
    if "body" not in b or b["method"] == "PATCH":
        continue
    parts = re.search(r"/apisix/admin/(.*)", b["url"]).group(1).strip("/").split("/")
    kind, body = parts[0], fill(b["body"])
    if kind in ("configs", "schema"):
        continue
    used = plugins_of(body, set())
    if kind == "consumers" and len(parts) >= 3 and parts[2] == "credentials":
        kind = "credentials"
        doc = {"consumers": [{"username": parts[1], "credentials": [dict(body, id=body.get("id", parts[3] if len(parts) > 3 else "c1"))]}]}
    elif kind == "services" and len(parts) >= 3:
        kind = parts[2]  # a service's sub-resource (graphql cost decorations)
        used.add("graphql-limit-count")
        doc = {kind: [body]}
    elif kind == "secrets":
        # A manager's id is <manager>/<id> (the URL's two segments).
        doc = {"secrets": [dict(body, id="/".join(parts[1:3]))]}
    elif kind == "plugin_metadata":
        used.add(parts[1] if len(parts) > 1 else "?")
        doc = {"plugin_metadata": [dict(body, id=parts[1] if len(parts) > 1 else "x")]}
    else:
        item = dict(body) if isinstance(body, dict) else body
        idf = "username" if kind == "consumers" else "id"
        if isinstance(item, dict) and idf not in item:
            item[idf] = parts[1] if len(parts) > 1 else "1"
        doc = {kind: [item]}
        if isinstance(item, dict):
            if "upstream_id" in item:
                doc.setdefault("upstreams", []).append(dict(UP, id=str(item["upstream_id"])))
            if "service_id" in item and kind != "services":
                doc.setdefault("services", []).append({"id": str(item["service_id"]), "upstream": UP})
            if "plugin_config_id" in item:
                doc.setdefault("plugin_configs", []).append({"id": str(item["plugin_config_id"]), "plugins": {}})
            if "group_id" in item:
                doc.setdefault("consumer_groups", []).append({"id": str(item["group_id"]), "plugins": {}})
    # `$secret://<manager>/<id>/...` names a manager defined elsewhere: a placeholder (the
    # check is --config-only: references are checked, not read).
    for manager, sid in sorted(set(re.findall(r"\$secret://(vault|aws|gcp)/([^/\"]+)/", json.dumps(body)))):
        placeholder = {"vault": {"uri": "http://127.0.0.1:8200", "prefix": "kv/apisix", "token": "root"},
                       "aws": {"access_key_id": "a", "secret_access_key": "s"},
                       "gcp": {"auth_file": "/dev/null"}}[manager]
        doc.setdefault("secrets", []).append(dict(placeholder, id=f"{manager}/{sid}"))
    doc.setdefault("listen", ["127.0.0.1:0"])
    if kind == "stream_routes":
        doc["stream_proxy"] = {"tcp": [9100], "udp": [9200]}
    # Registries are node settings (APISIX's config.yaml); its discovery.md's for Eureka.
    if '"discovery_type": "eureka"' in json.dumps(body):
        doc["discovery"] = {"eureka": {"host": ["http://127.0.0.1:8761"], "prefix": "/eureka/", "fetch_interval": 30,
                                       "weight": 100, "timeout": {"connect": 2000, "send": 2000, "read": 5000}}}
    path = f"{out}/{n:04d}.json"
    json.dump(doc, open(path, "w"), indent=1)
    env = dict(os.environ, JACK_JWT_SECRET="a-secret-of-jack")
    r = subprocess.run([args.sluice, "validate", "--config-only", "--config", path], capture_output=True, text=True, env=env)
    results.append({"n": n, "file": b["file"], "kind": kind, "ok": r.returncode == 0,
                    "ours": used <= PLUGINS, "plugins": sorted(used), "err": (r.stdout + r.stderr).strip()})

json.dump(results, open(f"{out}/results.json", "w"), indent=1)
ours = [r for r in results if r["ours"]]
print(f"| bodies | load |\n|---|---:|")
print(f"| all ({len(results)}) | {sum(r['ok'] for r in results)} ({100 * sum(r['ok'] for r in results) / len(results):.0f}%) |")
print(f"| only plugins Sluice has ({len(ours)}) | {sum(r['ok'] for r in ours)} ({100 * sum(r['ok'] for r in ours) / len(ours):.1f}%) |")
errs = collections.Counter()
for r in ours:
    if not r["ok"]:
        first = r["err"].splitlines()[0] if r["err"] else "?"
        first = re.sub(r"\[\d+\]", "[]", first)
        errs[re.sub(r'"[^"]*"', '"…"', first)[:150]] += 1
print("\nerrors of the bodies that use only Sluice's plugins, first error each:", file=sys.stderr)
for k, c in errs.most_common():
    print(f"{c:4d} {k}", file=sys.stderr)
print(f"\nfiles and results.json in {out}", file=sys.stderr)
