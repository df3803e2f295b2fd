"""Counts of the conformance kit's reports, for scripts/tck.sh.

    report.py variant DIR LEVEL...           counts per level and transport of one variant's run
    report.py union DIR VARIANT... -- LEVEL...
                                             what the variants together leave skipped, and why

DIR holds one folder per variant, each with one folder per level holding the kit's
compatibility.json and junitreport.xml. A requirement is judged per transport. The kit's
compatibility.json keeps, per requirement and transport, only the verdict of the last test
recorded, so a requirement marked FAIL is traced back to its failing JUnit test cases to tell
which transports failed. Exits 1 when a MUST requirement failed.
"""

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

TRANSPORTS = ("jsonrpc", "http_json", "grpc")
# A verdict of one variant beats the verdicts after it: a failure anywhere is a failure, a pass
# anywhere shows the requirement met.
VERDICT_RANK = ("FAIL", "PASS", "SKIPPED", "NOT TESTED")


def node_id(case):
    parts = case.get("classname", "").split(".")
    modules = [i for i, part in enumerate(parts) if part.startswith("test_")]
    cut = modules[-1] + 1 if modules else len(parts)
    return "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], case.get("name", "")])


def transport_of(test_id):
    name = test_id.rsplit("::", 1)[-1]
    if "[" in name:
        param = name[name.index("[") + 1 : -1]
        for transport in TRANSPORTS:
            if param == transport or param.endswith("-" + transport):
                return transport
    path = test_id.split("::", 1)[0]
    for transport in (*TRANSPORTS, "agent_card"):
        if f"/{transport}/" in path:
            return transport
    words = test_id.split("::", 1)[-1].lower()
    if "jsonrpc" in words:
        return "jsonrpc"
    if "rest" in words or "http_json" in words:
        return "http_json"
    if "grpc" in words:
        return "grpc"
    return None


class LevelRun:
    """One kit run (a variant at a level): its verdicts per requirement and transport."""

    def __init__(self, level_dir, level):
        report = json.loads((level_dir / "compatibility.json").read_text())
        failing_tests = set()
        self.skip_reasons = {}
        junit = level_dir / "junitreport.xml"
        if junit.exists():
            for case in ElementTree.parse(junit).getroot().iter("testcase"):
                if any(child.tag in ("failure", "error") for child in case):
                    failing_tests.add(node_id(case))
                for skipped in case.iter("skipped"):
                    self.skip_reasons[node_id(case)] = skipped.get("message", "").removeprefix("Skipped: ")
        wanted = level.upper()
        self.level = wanted
        self.per_transport = report["per_transport"]
        self.requirements = {}
        for req_id, req in sorted(report["per_requirement"].items()):
            if req["level"] != wanted:
                continue
            transports = dict(req["transports"])
            if req["status"] == "FAIL":
                culprits = {transport_of(t) for t in req["test_ids"] if t in failing_tests}
                culprits.discard(None)
                if not culprits:
                    # No failing JUnit case names a transport: blame those not skipped.
                    culprits = {t for t, verdict in transports.items() if verdict != "SKIPPED"}
                for transport in culprits:
                    transports[transport] = "FAIL"
            self.requirements[req_id] = (req, transports)

    def skip_reason(self, req, transport):
        reasons = {
            self.skip_reasons[t] for t in req["test_ids"] if t in self.skip_reasons and transport_of(t) == transport
        }
        return "; ".join(sorted(reasons)) or "no test of the kit ran it"


def level_runs(variant_dir, levels):
    for level in levels:
        level_dir = variant_dir / level
        if (level_dir / "compatibility.json").exists():
            yield LevelRun(level_dir, level)


def variant(variant_dir, levels):
    failed_must = 0
    for run in level_runs(variant_dir, levels):
        verdicts = Counter(req["status"] for req, _ in run.requirements.values())
        by_transport = {}
        for _, transports in run.requirements.values():
            for transport, verdict in transports.items():
                by_transport.setdefault(transport, Counter())[verdict] += 1
        if run.level == "MUST":
            failed_must += verdicts["FAIL"]
        print(f"{run.level}: requirements passed {verdicts['PASS']}, failed {verdicts['FAIL']}, "
              f"skipped {verdicts['SKIPPED']}, not tested by the kit {verdicts['NOT TESTED']}")
        for transport in sorted(by_transport):
            counts = by_transport[transport]
            print(f"  {run.level:<6} {transport:<10} passed {counts['PASS']:>3}  failed {counts['FAIL']:>3}"
                  f"  skipped {counts['SKIPPED']:>3}")
        for transport, counts in sorted(run.per_transport.items()):
            print(f"  {run.level:<6} {transport:<10} test results recorded by the kit: passed {counts['passed']},"
                  f" failed {counts['failed']}, skipped {counts['skipped']}, total {counts['total']}")
        for req_id, (req, _) in run.requirements.items():
            if req["status"] == "FAIL":
                errors = req["errors"][:1]
                print(f"  FAIL {req_id}: {errors[0][:300] if errors else ''}")
    return failed_must


def union(reports, variants, levels):
    """Each requirement on each transport, judged by the best verdict any variant got."""
    failed_must = 0
    for level in levels:
        best = {}
        skipped_by = {}
        for name in variants:
            for run in level_runs(reports / name, [level]):
                for req_id, (req, transports) in run.requirements.items():
                    for transport, verdict in transports.items():
                        key = (req_id, transport)
                        if key not in best or VERDICT_RANK.index(verdict) < VERDICT_RANK.index(best[key]):
                            best[key] = verdict
                        if verdict == "SKIPPED":
                            skipped_by.setdefault(key, []).append(f"{name}: {run.skip_reason(req, transport)}")
        if not best:
            continue
        counts = Counter(best.values())
        if level.upper() == "MUST":
            failed_must += counts["FAIL"]
        print(f"{level.upper()} over {', '.join(variants)}: requirement-transport pairs passed {counts['PASS']}, "
              f"failed {counts['FAIL']}, skipped in every variant {counts['SKIPPED']}")
        for (req_id, transport), verdict in sorted(best.items()):
            if verdict == "FAIL":
                print(f"  FAIL    {req_id} over {transport}")
            elif verdict == "SKIPPED":
                print(f"  SKIPPED {req_id} over {transport}:")
                for reason in skipped_by[(req_id, transport)]:
                    print(f"      {reason[:240]}")
    return failed_must


def main(args):
    mode, reports = args[0], Path(args[1])
    if mode == "variant":
        return variant(reports, args[2:])
    if mode == "union":
        split = args.index("--")
        return union(reports, args[2:split], args[split + 1 :])
    raise SystemExit(f"unknown mode {mode!r}: variant or union")


if __name__ == "__main__":
    sys.exit(1 if main(sys.argv[1:]) else 0)
