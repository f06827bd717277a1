"""The pure core of the metadata log: what the log is, with no I/O, no clock and no randomness.

- ``records``: the record types, versioned (the contract of the log); ``codec``: their msgpack encoding;
- ``image/``: the immutable ``MetadataImage``, one part per feature (clusters, topics, groups, gateways, key order,
  transactions) with its replay, and ``apply(image, records)``, the one function that makes the next image;
- ``snapshot``: an image written as records and read back;
- ``commands/``: pure commands, one module per feature, that validate a request against an image and return
  the records that carry it out; ``views``: the JSON views of an image;
- ``keymap``: the hash space of strict key order; ``publisher``: what is told to whoever follows the image;
- ``errors``: the one error tree of kfed (its root and the classes the HTTP edge answers with).

The server side (``metadata_quorum``) and the client library (``metadata_client``) build on it; it imports no
other package of kfed. Its own errors, under the tree's ``CorruptData`` and root:

    CorruptData
    ├── CodecError                 not a valid encoding of records    (also ValueError)
    ├── InvalidRecord              a record that does not apply       (also ValueError)
    └── KeyOrderError              why a key-order change does not fit its history (also ValueError)
    KfedError
    └── NewerMetadataVersion       written by a newer kfed: upgrade  (also ValueError)
"""
