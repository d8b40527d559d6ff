//! kivaloo's kvlds wire format, byte for byte as docs/kvlds-protocol.md
//! describes it: `packet` frames a record with its request ID and CRCs,
//! `request` reads request records and writes answer records. No I/O: the
//! server (`kivi serve --kvlds`) and the benchmark's clients both build on
//! it, so they cannot disagree about a byte.

pub mod packet;
pub mod request;
