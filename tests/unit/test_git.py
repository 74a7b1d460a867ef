"""`remit.changes.git` against real git in temporary folders: mirrors, fetches, refs, the
commits a branch adds, worktrees (removed after an error too), `ls_remote`, and the commits and
merges made in a bare repo."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from remit.changes.git import Commit, Git, GitError, MergeConflict, ls_remote


@pytest.fixture
def origin(tmp_path: Path) -> Git:
    """A bare repo with one commit on `main`."""
    git = Git.init_bare(tmp_path / "origin.git")
    git.run("symbolic-ref", "HEAD", "refs/heads/main")
    git.commit("main", files={"README.md": "ops\n"}, message="Start", author="ann")
    return git


def _worktrees(git: Git) -> list[str]:
    listed = git.run("worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in listed.splitlines() if line.startswith("worktree ")]


def test_a_mirror_is_cloned_then_fetched_and_pruned(origin: Git, tmp_path: Path) -> None:
    mirror = Git.mirror(str(origin.path), tmp_path / "cache" / "ops.git")
    assert mirror.resolve("main") == origin.resolve("main")
    assert mirror.branch("topic") is None

    topic = origin.commit("topic", files={"a.txt": "a\n"}, message="Add a", start="main")
    again = Git.mirror(str(origin.path), tmp_path / "cache" / "ops.git")  # present: fetched
    assert again.resolve("topic") == topic

    origin.run("update-ref", "-d", "refs/heads/topic")
    moved = origin.commit("main", files={"b.txt": "b\n"}, message="Add b")
    again.fetch()
    assert again.branch("topic") is None  # deleted at the origin, pruned here
    assert again.resolve("main") == moved


def test_a_mirror_refuses_a_folder_holding_something_else(origin: Git, tmp_path: Path) -> None:
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(GitError, match="holds something else"):
        Git.mirror(str(origin.path), folder)
    assert (folder / "notes.txt").read_text() == "mine"


def test_a_mirror_of_a_missing_repo_fails_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.git")
    with pytest.raises(GitError) as raised:
        Git.mirror(missing, tmp_path / "mirror.git")
    assert missing in str(raised.value)
    assert "git clone --mirror" in str(raised.value)
    assert raised.value.retryable


def test_resolve_names_an_unknown_ref(origin: Git) -> None:
    assert origin.resolve("refs/heads/main") == origin.resolve("main")
    with pytest.raises(GitError, match="no commit `nope` in the repo at") as raised:
        origin.resolve("nope")
    assert str(origin.path) in str(raised.value)
    with pytest.raises(GitError, match="starts with `-`"):
        origin.resolve("--all")


def test_commits_lists_what_head_adds_over_base_oldest_first(origin: Git) -> None:
    base = origin.resolve("main")
    first = origin.commit("topic", files={"a.txt": "a\n"}, message="Add a", author="bo", start=base)
    second = origin.commit("topic", files={"b.txt": "b\n"}, message="Add b\n\nWhy.", author="cy")
    assert origin.commits("main", "topic") == [
        Commit(sha=first, subject="Add a", author="bo"),
        Commit(sha=second, subject="Add b", author="cy"),
    ]
    assert origin.commits("topic", "main") == []


def test_a_worktree_holds_the_commit_and_is_removed_after(origin: Git) -> None:
    sha = origin.commit("main", files={"app/run.py": "print('hi')\n"}, message="Add run")
    with origin.worktree(sha) as tree:
        assert (tree / "app" / "run.py").read_text() == "print('hi')\n"
        assert (tree / "README.md").is_file()
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
        )
        assert head.stdout.strip() == sha
        assert str(tree) in _worktrees(origin)
    assert not tree.exists()
    assert _worktrees(origin) == [str(origin.path)]


def test_a_worktree_is_removed_after_an_error(origin: Git) -> None:
    used: list[Path] = []

    def check() -> None:
        with origin.worktree("main") as tree:
            used.append(tree)
            (tree / "scratch.txt").write_text("left behind?")
            raise RuntimeError("check failed")

    with pytest.raises(RuntimeError, match="check failed"):
        check()
    (tree,) = used
    assert not tree.exists()
    assert not tree.parent.exists()
    assert _worktrees(origin) == [str(origin.path)]


def test_ls_remote_answers_a_branch_a_tag_or_none(origin: Git) -> None:
    url = str(origin.path)
    main = origin.resolve("main")
    origin.run("tag", "v1", main)
    assert ls_remote(url, "main") == main
    assert ls_remote(url, "refs/heads/main") == main
    assert ls_remote(url, "v1") == main
    assert ls_remote(url, "nope") is None
    assert Git.ls_remote(url, main) == main  # a full sha is answered as it is


def test_ls_remote_of_an_unreachable_repo_fails(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="git ls-remote") as raised:
        ls_remote(str(tmp_path / "gone.git"), "main")
    assert raised.value.retryable


def test_a_commit_from_a_folder_holds_its_files(origin: Git, tmp_path: Path) -> None:
    folder = tmp_path / "work"
    (folder / "resources").mkdir(parents=True)
    (folder / "resources" / "desk.py").write_text("DESK = 1\n")
    (folder / "app.py").write_text("app\n")
    sha = origin.commit("main", folder=folder, message="Replace")
    listed = origin.run("ls-tree", "-r", "--name-only", sha).splitlines()
    assert listed == ["app.py", "resources/desk.py"]  # README.md is not in the folder
    assert origin.resolve("main") == sha


def test_commits_need_no_identity_of_the_users(
    origin: Git, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))  # ignored: the repo is given
    sha = origin.commit("main", files={"c.txt": "c\n"}, message="Add c", author="dee")
    assert origin.run("log", "-1", "--format=%an|%cn|%s", sha) == "dee|remit|Add c"


def test_a_merge_has_both_parents_and_moves_the_base(origin: Git) -> None:
    base = origin.resolve("main")
    head = origin.commit("topic", files={"a.txt": "a\n"}, message="Add a", start=base)
    moved = origin.commit("main", files={"b.txt": "b\n"}, message="Add b")
    merged = origin.merge("main", head, message="Merge topic")
    assert origin.resolve("main") == merged
    assert origin.run("rev-list", "--parents", "-n", "1", merged).split() == [merged, moved, head]
    assert origin.run("ls-tree", "--name-only", merged).splitlines() == [
        "README.md",
        "a.txt",
        "b.txt",
    ]
    assert origin.is_ancestor(head, "main")
    assert origin.merged_by("main", head) == merged


def test_a_conflicting_merge_is_refused_and_changes_nothing(origin: Git) -> None:
    base = origin.resolve("main")
    head = origin.commit("topic", files={"README.md": "theirs\n"}, message="Theirs", start=base)
    ours = origin.commit("main", files={"README.md": "ours\n"}, message="Ours")
    with pytest.raises(MergeConflict, match=r"README\.md") as raised:
        origin.merge("main", head, message="Merge topic")
    assert raised.value.paths == ("README.md",)
    assert origin.resolve("main") == ours
