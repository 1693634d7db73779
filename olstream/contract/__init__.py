"""Ground floor: the record contract (records, naming rules, Avro codec, wire headers, topic defaults)."""
