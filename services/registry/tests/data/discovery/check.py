#!/usr/bin/env python3
"""Validate the discovery evaluation set (agents.json, requests.json) in this directory.

Stdlib only. Exits non-zero and lists every problem found, so a broken label or a
renamed skill is caught before the ranking tests read the set.
"""
import json
import re
import sys
from collections import Counter
from pathlib import Path

MIN_AGENTS = 200
MIN_REQUESTS = 500
MAX_SKILLS_PER_AGENT = 4
SKILL_ID = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
REQUEST_ID = re.compile(r"^r(\d{4,})$")
SPLITS = ("tune", "held_out")


def normalise(text):
    # Examples and requests are compared ignoring case and spacing: a request that
    # differs from an example only by capitals would still leak the label.
    return " ".join(text.lower().split())


def is_str_list(value):
    return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)


def check_agents(agents, errors):
    skills_by_agent = {}
    examples = set()
    if not isinstance(agents, list):
        errors.append("agents.json: top level must be an array")
        return skills_by_agent, examples
    for i, card in enumerate(agents):
        where = f"agents[{i}]"
        if not isinstance(card, dict):
            errors.append(f"{where}: not an object")
            continue
        for key in ("name", "description", "version"):
            if not isinstance(card.get(key), str) or not card[key].strip():
                errors.append(f"{where}: missing or empty {key}")
        name = card.get("name")
        where = f"agent {name!r}"
        if name in skills_by_agent:
            errors.append(f"{where}: duplicate agent name")
        skills = card.get("skills")
        if not isinstance(skills, list) or not 1 <= len(skills) <= MAX_SKILLS_PER_AGENT:
            errors.append(f"{where}: needs 1-{MAX_SKILLS_PER_AGENT} skills")
            skills = skills if isinstance(skills, list) else []
        ids = set()
        for skill in skills:
            if not isinstance(skill, dict):
                errors.append(f"{where}: skill is not an object")
                continue
            sid = skill.get("id")
            if not isinstance(sid, str) or not SKILL_ID.match(sid):
                errors.append(f"{where}: skill id {sid!r} is not lower_snake_case")
            if sid in ids:
                errors.append(f"{where}: duplicate skill id {sid!r}")
            ids.add(sid)
            for key in ("name", "description"):
                if not isinstance(skill.get(key), str) or not skill[key].strip():
                    errors.append(f"{where}/{sid}: missing or empty {key}")
            for key in ("tags", "examples"):
                if key in skill and not (skill[key] == [] or is_str_list(skill[key])):
                    errors.append(f"{where}/{sid}: {key} must be an array of non-empty strings")
            for example in skill.get("examples") or []:
                if isinstance(example, str):
                    examples.add(normalise(example))
        skills_by_agent[name] = ids
    return skills_by_agent, examples


def check_requests(requests, skills_by_agent, examples, errors):
    covered = set()
    if not isinstance(requests, list):
        errors.append("requests.json: top level must be an array")
        return covered
    seen_ids, seen_texts = set(), set()
    for i, req in enumerate(requests):
        where = f"requests[{i}]"
        if not isinstance(req, dict):
            errors.append(f"{where}: not an object")
            continue
        rid = req.get("id")
        match = REQUEST_ID.match(rid) if isinstance(rid, str) else None
        if not match:
            errors.append(f"{where}: id {rid!r} is not r<number>")
        else:
            where = rid
            if rid in seen_ids:
                errors.append(f"{where}: duplicate id")
            seen_ids.add(rid)
            want = "held_out" if int(match.group(1)) % 3 == 0 else "tune"
            if req.get("split") != want:
                errors.append(f"{where}: split is {req.get('split')!r}, the rule says {want!r}")
        if req.get("split") not in SPLITS:
            errors.append(f"{where}: split must be one of {SPLITS}")
        text = req.get("text")
        if not isinstance(text, str) or not text.strip():
            errors.append(f"{where}: missing or empty text")
        else:
            if normalise(text) in examples:
                errors.append(f"{where}: text is a skill example verbatim: {text!r}")
            if normalise(text) in seen_texts:
                errors.append(f"{where}: duplicate text {text!r}")
            seen_texts.add(normalise(text))
        expected = req.get("expected")
        if not isinstance(expected, list) or not expected:
            errors.append(f"{where}: expected must be a non-empty array")
            continue
        pairs = set()
        for label in expected:
            if not isinstance(label, dict):
                errors.append(f"{where}: expected entry is not an object")
                continue
            pair = (label.get("agent"), label.get("skill"))
            if pair in pairs:
                errors.append(f"{where}: expected lists {pair} twice")
            pairs.add(pair)
            if pair[1] not in skills_by_agent.get(pair[0], ()):
                errors.append(f"{where}: expected {pair} is not a registered agent skill")
            covered.add(pair)
    return covered


def main():
    here = Path(__file__).resolve().parent
    errors = []
    try:
        agents = json.loads((here / "agents.json").read_text(encoding="utf-8"))
        requests = json.loads((here / "requests.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        print(f"cannot read the set: {err}")
        return 1
    skills_by_agent, examples = check_agents(agents, errors)
    covered = check_requests(requests, skills_by_agent, examples, errors)
    if len(agents) < MIN_AGENTS:
        errors.append(f"{len(agents)} agents, need at least {MIN_AGENTS}")
    if len(requests) < MIN_REQUESTS:
        errors.append(f"{len(requests)} requests, need at least {MIN_REQUESTS}")

    total_skills = sum(len(ids) for ids in skills_by_agent.values())
    splits = Counter(r.get("split") for r in requests if isinstance(r, dict))
    multi = sum(1 for r in requests if isinstance(r, dict) and len(r.get("expected") or []) > 1)
    agents_hit = {agent for agent, _ in covered}
    print(f"agents:   {len(agents)}")
    print(f"skills:   {total_skills} ({len(covered)} labelled by at least one request)")
    print(f"requests: {len(requests)} (tune {splits['tune']}, held_out {splits['held_out']}, "
          f"{multi} with more than one correct skill)")
    print(f"agents with at least one request: {len(agents_hit)}")
    for err in errors:
        print(f"ERROR: {err}")
    print("OK" if not errors else f"FAILED: {len(errors)} problem(s)")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
