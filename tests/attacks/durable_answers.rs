//! Issue #34 (placeholder, filled by the finding's fix).
