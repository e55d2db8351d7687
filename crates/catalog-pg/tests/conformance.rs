//! The catalog conformance suite on PostgreSQL: one server and database per test.

mod common;

sluice_meta::catalog_conformance!(common::Pg::start());
