//! Support for hookd's end-to-end tests; the tests themselves are in `it/`.
