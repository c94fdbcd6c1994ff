"""Record batches (magic v2): header codec, validation, compression."""
