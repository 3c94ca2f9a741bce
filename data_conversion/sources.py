"""Where DSRL files come from: DSRL's host on the Hugging Face Hub, a local directory, or a plain HTTP mirror.

Every source gives a file by its DSRL name (e.g. ``SafetyBallCircle-v0-80-886.hdf5``) and says what it knows
about it beforehand (`Advertised`: size and sha256, where it provides them); `verified_sha256` checks a file
against that. The Hub gives both for its LFS files (``X-Linked-Size``, and ``X-Linked-Etag``, the sha256); a
directory or a mirror gives them through an optional ``SHA256SUMS`` file (``sha256sum`` output) at its root, a
mirror also its ``Content-Length``.

- `HubSource` (``hf``): ``huggingface_hub.hf_hub_download`` with its cache (``HF_HOME``/``HF_HUB_CACHE``),
  resumed downloads, retries and timeouts (``HF_HUB_DOWNLOAD_TIMEOUT``, ``HF_HUB_ETAG_TIMEOUT``); it honours
  ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` (cached files only).
- `DirSource` (a directory): the file is read in place.
- `UrlSource` (``http(s)://PREFIX``): ``PREFIX/<name>``, downloaded with huggingface_hub's resumable ``http_get``
  into a cache directory (``$RLLIB_CAPS_CACHE``, default ``~/.cache/rllib_caps``), kept there once verified.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rllib_caps.data.errors import DatasetError
from rllib_caps.envs.compat.dsrl import HF_REPO_ID, HF_REVISION
from rllib_caps.utils.checksum import file_sha256

SUMS_FILE = "SHA256SUMS"
_SHA256 = re.compile(r"[0-9a-f]{64}")


class FetchError(DatasetError):
    """A DSRL file cannot be had from its source, or does not match what the source advertises."""


@dataclass(frozen=True)
class Advertised:
    """What a source says about a file before it is fetched (None: the source does not say)."""

    size: int | None = None
    sha256: str | None = None


def verified_sha256(path: Path, name: str, advertised: Advertised, source: str) -> str:
    """The file's sha256, after checking its size and sha256 against ``advertised``; `FetchError` otherwise."""
    size = path.stat().st_size
    if advertised.size is not None and size != advertised.size:
        raise FetchError(f"{name} from {source}: {size} bytes, but the source advertises {advertised.size}; "
                         "refused (truncated or replaced file?)")
    digest = file_sha256(path)
    if advertised.sha256 is not None and digest != advertised.sha256:
        raise FetchError(f"{name} from {source}: sha256 {digest[:12]}… differs from the advertised "
                         f"{advertised.sha256[:12]}…; refused (corrupt download or replaced file?)")
    return digest


def parse_sums(text: str) -> dict[str, str]:
    """``sha256sum`` output (``<hex>  <name>`` or ``<hex> *<name>`` per line) as {name: hex}."""
    sums = {}
    for line in text.splitlines():
        parts = line.strip().split(maxsplit=1)
        if len(parts) == 2 and _SHA256.fullmatch(parts[0].lower()):
            sums[parts[1].lstrip("*").strip()] = parts[0].lower()
    return sums


def _etag_sha256(etag: str | None) -> str | None:
    """The sha256 inside an ETag, when it is one (the Hub's ``X-Linked-Etag`` of an LFS file)."""
    value = (etag or "").removeprefix("W/").strip('"').lower()
    return value if _SHA256.fullmatch(value) else None


@dataclass(frozen=True)
class HubSource:
    """DSRL's dataset repo on the Hugging Face Hub (or the Hub-compatible endpoint in ``HF_ENDPOINT``)."""

    repo_id: str = HF_REPO_ID
    revision: str = HF_REVISION

    @property
    def label(self) -> str:
        return f"hf:{self.repo_id}"

    def _where(self) -> str:
        from huggingface_hub import constants

        return f"{constants.ENDPOINT} (HF_ENDPOINT), dataset {self.repo_id}"

    def advertised(self, name: str) -> Advertised:
        """Size and sha256 from the Hub's HEAD of the file; nothing offline or when the Hub cannot be reached
        (`fetch` then says why, or uses the cache)."""
        import httpx2
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
        from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

        if constants.is_offline_mode():
            return Advertised()
        url = hf_hub_url(self.repo_id, name, repo_type="dataset", revision=self.revision)
        try:
            meta = get_hf_file_metadata(url)
        except (httpx2.HTTPError, HfHubHTTPError, OfflineModeIsEnabled, OSError):
            return Advertised()
        return Advertised(meta.size, _etag_sha256(meta.etag))

    def fetch(self, name: str) -> Path:
        """The file in the Hub cache, downloaded (resuming a partial download) when it is not there."""
        import httpx2
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RemoteEntryNotFoundError

        try:
            return Path(hf_hub_download(self.repo_id, name, repo_type="dataset", revision=self.revision))
        except RemoteEntryNotFoundError as err:
            raise FetchError(f"{name}: not in {self._where()}") from err
        except LocalEntryNotFoundError as err:
            cause = err.__cause__ or err.__context__
            why = "HF_HUB_OFFLINE is set" if constants.is_offline_mode() else f"cannot reach it: {one_line(cause)}"
            raise FetchError(f"{name}: not in the Hub cache {constants.HF_HUB_CACHE} and {self._where()}: {why}") \
                from err
        except (HfHubHTTPError, httpx2.HTTPError, OSError) as err:
            raise FetchError(f"{name}: download from {self._where()} failed: {one_line(err)}") from err

    def discard(self, path: Path) -> None:
        """Drop a refused file from the cache (the blob and its snapshot link), so the next run downloads it."""
        blob = path.resolve()
        path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)


@dataclass(frozen=True)
class DirSource:
    """A local directory of DSRL files under their DSRL names (e.g. a copy made on another machine)."""

    path: Path

    @property
    def label(self) -> str:
        return str(self.path)

    def advertised(self, name: str) -> Advertised:
        sums = self.path / SUMS_FILE
        return Advertised(sha256=parse_sums(sums.read_text()).get(name) if sums.is_file() else None)

    def fetch(self, name: str) -> Path:
        file = self.path / name
        if not file.is_file():
            raise FetchError(f"{name}: no such file in --source {self.path}")
        return file

    def discard(self, path: Path) -> None:
        """A directory's files are never deleted."""


@dataclass(frozen=True)
class UrlSource:
    """A plain HTTP(S) mirror: ``PREFIX/<name>``; downloads are cached under ``cache_dir``."""

    prefix: str
    cache_dir: Path

    @property
    def label(self) -> str:
        return self.prefix

    def _url(self, name: str) -> str:
        return f"{self.prefix.rstrip('/')}/{name}"

    def advertised(self, name: str) -> Advertised:
        """``Content-Length`` and a sha256 ETag from a HEAD request, or the mirror's ``SHA256SUMS``."""
        import httpx2

        try:
            head = httpx2.head(self._url(name), follow_redirects=True, timeout=_timeout(),
                               headers={"Accept-Encoding": "identity"})
            sums = httpx2.get(self._url(SUMS_FILE), follow_redirects=True, timeout=_timeout())
        except httpx2.HTTPError:
            return Advertised()
        size, sha = None, None
        if head.is_success:
            size = head.headers.get("X-Linked-Size") or head.headers.get("Content-Length")
            sha = _etag_sha256(head.headers.get("X-Linked-Etag") or head.headers.get("ETag"))
        if sha is None and sums.is_success:
            sha = parse_sums(sums.text).get(name)
        return Advertised(int(size) if size is not None else None, sha)

    def fetch(self, name: str) -> Path:
        """The cached file, or a download into ``<name>.incomplete`` that continues where an earlier one
        stopped (HTTP Range), retried on connection errors."""
        import httpx2
        from huggingface_hub.errors import HfHubHTTPError
        from huggingface_hub.file_download import http_get

        target = self.cache_dir / hashlib.sha256(self.prefix.encode()).hexdigest()[:16] / name
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".incomplete")
        try:
            with partial.open("ab") as f:
                http_get(self._url(name), f, resume_size=f.tell(), displayed_filename=name)
        except (HfHubHTTPError, httpx2.HTTPError, OSError) as err:
            raise FetchError(f"{name}: download from {self._url(name)} failed: {one_line(err)}") from err
        os.replace(partial, target)
        return target

    def discard(self, path: Path) -> None:
        path.unlink(missing_ok=True)


Source = HubSource | DirSource | UrlSource


def default_cache_dir() -> Path:
    """Where `UrlSource` keeps its downloads: ``$RLLIB_CAPS_CACHE`` or ``~/.cache/rllib_caps``."""
    return Path(os.environ.get("RLLIB_CAPS_CACHE") or Path.home() / ".cache" / "rllib_caps") / "dsrl"


def parse_source(text: str) -> Source:
    """``hf``, an ``http(s)://`` URL prefix, or an existing directory; `FetchError` naming ``--source`` else."""
    if text == "hf":
        return HubSource()
    if text.startswith(("http://", "https://")):
        return UrlSource(text, default_cache_dir())
    path = Path(text).expanduser()
    if path.is_dir():
        return DirSource(path.resolve())
    raise FetchError(f"--source {text}: not 'hf', an http(s):// URL prefix, or an existing directory")


def _timeout() -> float:
    from huggingface_hub import constants

    return float(constants.HF_HUB_DOWNLOAD_TIMEOUT)


def one_line(err: BaseException | None, limit: int = 300) -> str:
    """An exception as one line of at most ``limit`` characters (its type when it has no message)."""
    if err is None:
        return "unknown error"
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
