"""Print pinned requirement lines from pyproject.toml, one per line, for `pip install -r -` inside image builds.

    python3 requirements.py pyproject.toml [GROUP ...] [--only NAME ...] [--exclude NAME ...]

GROUP is `base` (project.dependencies) or an optional-dependency group. Keeps pyproject.toml the one source of the
pins, so the Dockerfiles never repeat a version. Stdlib only: it runs in the bare base image.
"""

import re
import sys
import tomllib


def _name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")


def select(project: dict, groups: list[str], only: set[str], exclude: set[str]) -> list[str]:
    reqs: list[str] = []
    for group in groups or ["base"]:
        reqs += project["dependencies"] if group == "base" else project["optional-dependencies"][group]
    if only:
        every = project["dependencies"] + [r for g in project["optional-dependencies"].values() for r in g]
        reqs = [r for r in every if _name(r) in only]
    return [r for r in dict.fromkeys(reqs) if _name(r) not in exclude]


def main(argv: list[str]) -> None:
    path, rest = argv[0], argv[1:]
    groups: list[str] = []
    only: set[str] = set()
    exclude: set[str] = set()
    mode = "groups"
    for arg in rest:
        if arg in ("--only", "--exclude"):
            mode = arg
        elif mode == "--only":
            only.add(arg.lower())
        elif mode == "--exclude":
            exclude.add(arg.lower())
        else:
            groups.append(arg)
    with open(path, "rb") as fh:
        project = tomllib.load(fh)["project"]
    print("\n".join(select(project, groups, only, exclude)))


if __name__ == "__main__":
    main(sys.argv[1:])
