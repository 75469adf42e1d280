//! The columns of an export: the schema and one Arrow builder per column, a row at a time.
//!
//! Every row has `receive_time`, `topic`, `session_id` and `sequence`. A market data row
//! fills `message_type` and what its message carries (`embedded_time`, `service`, `item`,
//! `item_id`, `item_seq`, `state`, `text` and one column per dictionary field); a raw row
//! fills `payload`. Whatever a row does not carry is null.

use arrow_array::builder::{
    BinaryBuilder, Decimal128Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder,
    UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use peregrine_md::dictionary::Dictionary;
use peregrine_md::model::{Kind, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The columns every export has, in order, before the dictionary's fields.
pub const FIXED_COLUMNS: [&str; 13] = [
    "receive_time",
    "topic",
    "session_id",
    "sequence",
    "message_type",
    "embedded_time",
    "service",
    "item",
    "item_id",
    "item_seq",
    "state",
    "text",
    "payload",
];

/// Prices are exact decimals: a wire price is `mantissa × 10^exponent` with an i64 mantissa
/// and an exponent of -12 to 6, so every one is a Decimal128 of scale 12 (the mantissa times
/// at most 10^18 stays under 10^37).
pub const PRICE_PRECISION: u8 = 38;
pub const PRICE_SCALE: i8 = 12;

const UTC: &str = "UTC";

fn timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into()))
}

/// A market data message as one row's columns.
#[derive(Debug, Default)]
pub struct MdColumns<'a> {
    pub message_type: &'a str,
    pub embedded_ns: Option<u64>,
    pub service: Option<&'a str>,
    pub item: Option<&'a str>,
    pub item_id: Option<u32>,
    pub item_seq: Option<u32>,
    pub state: Option<&'a str>,
    pub text: Option<&'a str>,
}

/// What was left out of field columns.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FieldLoss {
    /// Values whose field id the dictionary does not have.
    pub unknown_fields: u64,
    /// Values whose kind is not the dictionary's for their id (or a time past 2262): null.
    pub kind_mismatches: u64,
}

#[derive(Debug)]
enum FieldColumn {
    Int(Int64Builder),
    Price(Decimal128Builder),
    Time(TimestampNanosecondBuilder),
    Enum(UInt16Builder),
    Str(StringBuilder),
}

impl FieldColumn {
    fn new(kind: Kind) -> Result<FieldColumn, ArrowError> {
        Ok(match kind {
            Kind::Int => FieldColumn::Int(Int64Builder::new()),
            Kind::Price => FieldColumn::Price(
                Decimal128Builder::new().with_precision_and_scale(PRICE_PRECISION, PRICE_SCALE)?,
            ),
            Kind::Time => FieldColumn::Time(TimestampNanosecondBuilder::new().with_timezone(UTC)),
            Kind::Enum => FieldColumn::Enum(UInt16Builder::new()),
            Kind::String => FieldColumn::Str(StringBuilder::new()),
        })
    }

    fn data_type(kind: Kind) -> DataType {
        match kind {
            Kind::Int => DataType::Int64,
            Kind::Price => DataType::Decimal128(PRICE_PRECISION, PRICE_SCALE),
            Kind::Time => timestamp(),
            Kind::Enum => DataType::UInt16,
            Kind::String => DataType::Utf8,
        }
    }

    /// Appends `value`; null (and false) when it is not this column's kind or out of its range.
    fn append(&mut self, value: Option<Value<'_>>) -> bool {
        match (self, value) {
            (FieldColumn::Int(b), Some(Value::Int(v))) => b.append_value(v),
            (FieldColumn::Price(b), Some(Value::Price(p))) => {
                match price_units(p.mantissa, p.exponent) {
                    Some(v) => b.append_value(v),
                    None => {
                        b.append_null();
                        return false;
                    }
                }
            }
            (FieldColumn::Time(b), Some(Value::TimeNs(t))) => match i64::try_from(t) {
                Ok(t) => b.append_value(t),
                Err(_) => {
                    b.append_null();
                    return false;
                }
            },
            (FieldColumn::Enum(b), Some(Value::Enum(e))) => b.append_value(e),
            (FieldColumn::Str(b), Some(Value::Str(s))) => b.append_value(s),
            (column, value) => {
                column.append_null();
                return value.is_none();
            }
        }
        true
    }

    fn append_null(&mut self) {
        match self {
            FieldColumn::Int(b) => b.append_null(),
            FieldColumn::Price(b) => b.append_null(),
            FieldColumn::Time(b) => b.append_null(),
            FieldColumn::Enum(b) => b.append_null(),
            FieldColumn::Str(b) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            FieldColumn::Int(b) => Arc::new(b.finish()),
            FieldColumn::Price(b) => Arc::new(b.finish()),
            FieldColumn::Time(b) => Arc::new(b.finish()),
            FieldColumn::Enum(b) => Arc::new(b.finish()),
            FieldColumn::Str(b) => Arc::new(b.finish()),
        }
    }
}

/// `mantissa × 10^exponent` in units of 10^-12; `None` past what a Decimal128(38, 12) holds.
pub fn price_units(mantissa: i64, exponent: i8) -> Option<i128> {
    let shift = i32::from(exponent) + i32::from(PRICE_SCALE);
    if !(0..=24).contains(&shift) {
        return None;
    }
    i128::from(mantissa).checked_mul(10i128.checked_pow(shift as u32)?)
}

/// The builders of one batch of rows.
#[derive(Debug)]
pub struct Columns {
    schema: SchemaRef,
    receive_time: TimestampNanosecondBuilder,
    topic: StringBuilder,
    session_id: UInt32Builder,
    sequence: UInt64Builder,
    message_type: StringBuilder,
    embedded_time: TimestampNanosecondBuilder,
    service: StringBuilder,
    item: StringBuilder,
    item_id: UInt32Builder,
    item_seq: UInt32Builder,
    state: StringBuilder,
    text: StringBuilder,
    payload: BinaryBuilder,
    fields: Vec<FieldColumn>,
    by_fid: HashMap<u16, usize>,
    /// The field columns the row being built has filled.
    filled: Vec<bool>,
    rows: usize,
}

/// Why the columns could not be laid out.
#[derive(Debug)]
pub enum SchemaError {
    /// A dictionary field has the name of a fixed column.
    Clash {
        name: String,
    },
    Arrow(ArrowError),
}

impl Columns {
    /// The columns for `dictionary`'s fields (by field id, each named as the dictionary names
    /// it).
    pub fn new(dictionary: &Dictionary) -> Result<Columns, SchemaError> {
        let mut schema = vec![
            Field::new("receive_time", timestamp(), false),
            Field::new("topic", DataType::Utf8, false),
            Field::new("session_id", DataType::UInt32, false),
            Field::new("sequence", DataType::UInt64, false),
            Field::new("message_type", DataType::Utf8, true),
            Field::new("embedded_time", timestamp(), true),
            Field::new("service", DataType::Utf8, true),
            Field::new("item", DataType::Utf8, true),
            Field::new("item_id", DataType::UInt32, true),
            Field::new("item_seq", DataType::UInt32, true),
            Field::new("state", DataType::Utf8, true),
            Field::new("text", DataType::Utf8, true),
            Field::new("payload", DataType::Binary, true),
        ];
        let mut fields = Vec::new();
        let mut by_fid = HashMap::new();
        for def in dictionary.iter() {
            if FIXED_COLUMNS.contains(&def.name.as_str()) {
                return Err(SchemaError::Clash {
                    name: def.name.clone(),
                });
            }
            by_fid.insert(def.fid, fields.len());
            fields.push(FieldColumn::new(def.kind).map_err(SchemaError::Arrow)?);
            schema.push(Field::new(
                def.name.as_str(),
                FieldColumn::data_type(def.kind),
                true,
            ));
        }
        Ok(Columns {
            schema: Arc::new(Schema::new(schema)),
            receive_time: TimestampNanosecondBuilder::new().with_timezone(UTC),
            topic: StringBuilder::new(),
            session_id: UInt32Builder::new(),
            sequence: UInt64Builder::new(),
            message_type: StringBuilder::new(),
            embedded_time: TimestampNanosecondBuilder::new().with_timezone(UTC),
            service: StringBuilder::new(),
            item: StringBuilder::new(),
            item_id: UInt32Builder::new(),
            item_seq: UInt32Builder::new(),
            state: StringBuilder::new(),
            text: StringBuilder::new(),
            payload: BinaryBuilder::new(),
            filled: vec![false; fields.len()],
            fields,
            by_fid,
            rows: 0,
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Rows appended since the last [`finish`](Self::finish).
    pub fn rows(&self) -> usize {
        self.rows
    }

    fn push_common(&mut self, receive_ns: u64, topic: &str, session_id: u32, sequence: u64) {
        // (Receive times are the recorder's wall clock: before 2262, so within i64.)
        self.receive_time
            .append_value(i64::try_from(receive_ns).unwrap_or(i64::MAX));
        self.topic.append_value(topic);
        self.session_id.append_value(session_id);
        self.sequence.append_value(sequence);
        self.rows += 1;
    }

    /// A row of raw bytes.
    pub fn push_raw(
        &mut self,
        receive_ns: u64,
        topic: &str,
        session_id: u32,
        sequence: u64,
        payload: &[u8],
    ) {
        self.push_common(receive_ns, topic, session_id, sequence);
        self.message_type.append_null();
        self.embedded_time.append_null();
        self.service.append_null();
        self.item.append_null();
        self.item_id.append_null();
        self.item_seq.append_null();
        self.state.append_null();
        self.text.append_null();
        self.payload.append_value(payload);
        for f in &mut self.fields {
            f.append_null();
        }
    }

    /// A row of a market data message and its fields.
    #[allow(clippy::too_many_arguments)]
    pub fn push_md<'v>(
        &mut self,
        receive_ns: u64,
        topic: &str,
        session_id: u32,
        sequence: u64,
        md: &MdColumns<'_>,
        fields: impl Iterator<Item = peregrine_md::model::Field<'v>>,
        loss: &mut FieldLoss,
    ) {
        self.push_common(receive_ns, topic, session_id, sequence);
        self.message_type.append_value(md.message_type);
        self.embedded_time
            .append_option(md.embedded_ns.and_then(|t| i64::try_from(t).ok()));
        self.service.append_option(md.service);
        self.item.append_option(md.item);
        self.item_id.append_option(md.item_id);
        self.item_seq.append_option(md.item_seq);
        self.state.append_option(md.state);
        self.text.append_option(md.text);
        self.payload.append_null();
        // Each field's value goes to its column, then a null to every column the message left
        // out: a message holds each field id at most once (the codec refuses repeats), so
        // every column grows by exactly one.
        for f in fields {
            match self.by_fid.get(&f.fid) {
                Some(&i) if !self.filled[i] => {
                    self.filled[i] = true;
                    if !self.fields[i].append(Some(f.value)) {
                        loss.kind_mismatches += 1;
                    }
                }
                Some(_) => {}
                None => loss.unknown_fields += 1,
            }
        }
        for (column, filled) in self.fields.iter_mut().zip(self.filled.iter_mut()) {
            if !std::mem::take(filled) {
                column.append_null();
            }
        }
    }

    /// The rows appended so far as one batch; the builders start empty again.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let mut arrays: Vec<ArrayRef> = vec![
            Arc::new(self.receive_time.finish()),
            Arc::new(self.topic.finish()),
            Arc::new(self.session_id.finish()),
            Arc::new(self.sequence.finish()),
            Arc::new(self.message_type.finish()),
            Arc::new(self.embedded_time.finish()),
            Arc::new(self.service.finish()),
            Arc::new(self.item.finish()),
            Arc::new(self.item_id.finish()),
            Arc::new(self.item_seq.finish()),
            Arc::new(self.state.finish()),
            Arc::new(self.text.finish()),
            Arc::new(self.payload.finish()),
        ];
        arrays.extend(self.fields.iter_mut().map(FieldColumn::finish));
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), arrays)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_price_is_an_exact_decimal_of_scale_12() {
        assert_eq!(price_units(18921, -2), Some(189_210_000_000_000));
        assert_eq!(price_units(-5, -3), Some(-5_000_000_000));
        assert_eq!(price_units(1, -12), Some(1));
        assert_eq!(
            price_units(i64::MAX, 6),
            Some(i128::from(i64::MAX) * 10i128.pow(18))
        );
        assert!(price_units(i64::MIN, 6).unwrap().unsigned_abs() < 10u128.pow(38));
        assert_eq!(price_units(1, -13), None);
    }
}
