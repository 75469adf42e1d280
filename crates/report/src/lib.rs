//! Peregrine's benchmark results: the [`model`] of a results folder.
#![deny(unsafe_code)]

pub mod model;
