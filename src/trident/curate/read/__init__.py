"""Reading: input files (WARC, HTML, JSONL[.gz|.zst]) and work shards as Documents, and writing shards.

Public: shards.read_documents, shards.read_shard, shards.write_shard, shards.ShardWriter,
shards.input_format, shards.coalesce_inputs, record_log.RecordLog, warc.read_warc,
shard_lines.shard_documents, read_task.read_raw_documents.
"""
