package nbd

// Wire constants of the NBD protocol (fixed newstyle negotiation and the
// simple-reply transmission phase). All integers are big-endian.

const (
	nbdMagic          uint64 = 0x4e42444d41474943 // "NBDMAGIC"
	ihaveOpt          uint64 = 0x49484156454f5054 // "IHAVEOPT"
	optReplyMagic     uint64 = 0x0003e889045565a9
	requestMagic      uint32 = 0x25609513
	simpleReplyMagic  uint32 = 0x67446698
	structReplyMagic  uint32 = 0x668e33ef
	requestHeaderSize        = 28
	replyHeaderSize          = 16
)

// Handshake flags (server) and client flags.
const (
	flagFixedNewstyle uint16 = 1 << 0
	flagNoZeroes      uint16 = 1 << 1

	clientFlagFixedNewstyle uint32 = 1 << 0
	clientFlagNoZeroes      uint32 = 1 << 1
	clientFlagsKnown               = clientFlagFixedNewstyle | clientFlagNoZeroes
)

// Options.
const (
	optExportName      uint32 = 1
	optAbort           uint32 = 2
	optList            uint32 = 3
	optPeekExport      uint32 = 4
	optStartTLS        uint32 = 5
	optInfo            uint32 = 6
	optGo              uint32 = 7
	optStructuredReply uint32 = 8
	optListMetaContext uint32 = 9
	optSetMetaContext  uint32 = 10
)

// Option reply types.
const (
	repAck    uint32 = 1
	repServer uint32 = 2
	repInfo   uint32 = 3
	repMeta   uint32 = 4 // NBD_REP_META_CONTEXT

	repFlagError    uint32 = 1 << 31
	repErrUnsup            = repFlagError | 1
	repErrPolicy           = repFlagError | 2
	repErrInvalid          = repFlagError | 3
	repErrPlatform         = repFlagError | 4
	repErrTLSReqd          = repFlagError | 5
	repErrUnknown          = repFlagError | 6
	repErrShutdown         = repFlagError | 7
	repErrBlockSize        = repFlagError | 8
	repErrTooBig           = repFlagError | 9
)

// Info types for NBD_OPT_INFO / NBD_OPT_GO.
const (
	infoExport      uint16 = 0
	infoName        uint16 = 1
	infoDescription uint16 = 2
	infoBlockSize   uint16 = 3
)

// Transmission flags.
const (
	tflagHasFlags        uint16 = 1 << 0
	tflagReadOnly        uint16 = 1 << 1
	tflagSendFlush       uint16 = 1 << 2
	tflagSendFUA         uint16 = 1 << 3
	tflagRotational      uint16 = 1 << 4
	tflagSendTrim        uint16 = 1 << 5
	tflagSendWriteZeroes uint16 = 1 << 6
	tflagSendDF          uint16 = 1 << 7
	tflagCanMultiConn    uint16 = 1 << 8
)

// Commands.
const (
	cmdRead        uint16 = 0
	cmdWrite       uint16 = 1
	cmdDisc        uint16 = 2
	cmdFlush       uint16 = 3
	cmdTrim        uint16 = 4
	cmdCache       uint16 = 5
	cmdWriteZeroes uint16 = 6
	cmdBlockStatus uint16 = 7
)

// Command flags.
const (
	cmdFlagFUA    uint16 = 1 << 0
	cmdFlagNoHole uint16 = 1 << 1
	cmdFlagDF     uint16 = 1 << 2
	cmdFlagReqOne uint16 = 1 << 3
)

// Structured reply chunks (NBD_OPT_STRUCTURED_REPLY).
const (
	structHeaderSize = 20

	replyFlagDone uint16 = 1 << 0

	replyTypeNone        uint16 = 0
	replyTypeOffsetData  uint16 = 1
	replyTypeOffsetHole  uint16 = 2
	replyTypeBlockStatus uint16 = 5
	replyTypeError       uint16 = 1<<15 | 1
)

// The base:allocation meta context: its one namespace, name, the id the
// server gives it, and its status flags.
const (
	metaBaseNamespace = "base:"
	metaBaseAlloc     = "base:allocation"
	metaAllocID       = 1

	stateHole uint32 = 1 << 0
	stateZero uint32 = 1 << 1
)

// Error values carried in simple replies.
const (
	errnoOK       uint32 = 0
	errnoPerm     uint32 = 1
	errnoIO       uint32 = 5
	errnoNoMem    uint32 = 12
	errnoInval    uint32 = 22
	errnoNoSpc    uint32 = 28
	errnoOverflow uint32 = 75
	errnoNotSup   uint32 = 95
	errnoShutdown uint32 = 108
)

// Limits.
const (
	// maxOptionLength bounds the payload of one option; longer payloads
	// get NBD_REP_ERR_TOO_BIG and the connection is closed unread.
	maxOptionLength = 64 << 10
	// maxNameLength is the protocol's upper bound on strings.
	maxNameLength = 4096
	// maxOptions bounds the number of options in one handshake.
	maxOptions = 1024
	// defaultMaxRequest is Options.MaxRequest's default.
	defaultMaxRequest = 32 << 20
	// maxInFlight bounds concurrently handled requests per connection.
	maxInFlight = 16
	// preferredBlockSize is advertised in NBD_INFO_BLOCK_SIZE when the
	// export has no preference of its own.
	preferredBlockSize = 4096
	// maxMetaQueries bounds the queries of one LIST/SET_META_CONTEXT.
	maxMetaQueries = 128
	// maxStatusExtents bounds the descriptors of one BLOCK_STATUS reply;
	// the client asks again from where it ends.
	maxStatusExtents = 2048
	// holeReadMin is the smallest structured READ that asks the export
	// where its holes are and sends them as NBD_REPLY_TYPE_OFFSET_HOLE.
	holeReadMin = 64 << 10
)
