"""The metadata log: records, codec, the immutable image, pure apply and commands, and the Raft shell."""
