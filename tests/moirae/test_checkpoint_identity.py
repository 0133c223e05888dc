"""The archive's batch log is tied to its checkpoint's identity
(moirae.runtime.checkpoint_identity): a lost or foreign checkpoint is refused in one
line saying what to do, never skipped; a new one and a pre-identity one are recorded."""

from __future__ import annotations

import shutil
import stat
from datetime import timedelta

import pytest

from archive import Archiver
from archive.settings import ArchiveSettings
from moirae.runtime.checkpoint_identity import IDENTITY_FILE, CheckpointMismatch, verify
from tests.archive.arch_helpers import metrics_spec, rows

pytestmark = pytest.mark.postgres


@pytest.fixture
def arch(pg):
    a = Archiver(pg, ArchiveSettings(chunk_span=timedelta(hours=1)))
    a.register_stream(metrics_spec())
    yield a
    a.close()


def test_a_new_checkpoint_is_recorded_and_then_recognised(arch, tmp_path):
    ckpt = tmp_path / "checkpoints" / "metrics"
    ident = verify(arch.db, "metrics", ckpt)
    assert (ckpt / IDENTITY_FILE).read_text().strip() == ident
    assert stat.S_IMODE((ckpt / IDENTITY_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(ckpt.stat().st_mode) == 0o700
    arch.append("metrics", 0, rows(10))
    assert verify(arch.db, "metrics", ckpt) == ident  # a restart with the same checkpoint


def test_a_lost_checkpoint_is_refused_in_one_line(arch, tmp_path):
    ckpt = tmp_path / "checkpoints" / "metrics"
    verify(arch.db, "metrics", ckpt)
    for b in range(3):
        arch.append("metrics", b, rows(10, first=10 * b))
    shutil.rmtree(ckpt)  # the data directory was lost; the external database survived
    with pytest.raises(CheckpointMismatch) as err:
        verify(arch.db, "metrics", ckpt)
    msg = str(err.value)
    assert "\n" not in msg and "is missing" in msg and "batches up to 2" in msg and "restore" in msg
    assert arch.append("metrics", 0, rows(10, first=999)).duplicate  # what would have happened: batch 0 skipped
    assert not ckpt.exists() or not (ckpt / IDENTITY_FILE).exists()  # refused: nothing recorded anew


def test_the_drivers_own_loads_need_no_checkpoint(arch, tmp_path):
    arch.append("metrics", -1, rows(10), bulk=True)  # a history load: no checkpoint numbered it
    ident = verify(arch.db, "metrics", tmp_path / "new")
    assert (tmp_path / "new" / IDENTITY_FILE).read_text().strip() == ident


def test_a_foreign_checkpoint_is_refused(arch, tmp_path):
    verify(arch.db, "metrics", tmp_path / "a")
    arch.append("metrics", 0, rows(10))
    other = tmp_path / "b"
    other.mkdir()
    (other / IDENTITY_FILE).write_text("0123456789abcdef\n")
    with pytest.raises(CheckpointMismatch, match="is not the one the archive's batch log was written with"):
        verify(arch.db, "metrics", other)


def test_a_checkpoint_from_before_identities_is_adopted(arch, tmp_path):
    arch.append("metrics", 0, rows(10))  # an archive written before identities existed
    ckpt = tmp_path / "old"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "offsets" / "0").write_text("v1\n")  # Spark's progress is there
    ident = verify(arch.db, "metrics", ckpt)
    assert verify(arch.db, "metrics", ckpt) == ident
    with pytest.raises(CheckpointMismatch, match="is missing"):  # but not a bare one
        verify(arch.db, "metrics", tmp_path / "bare")
