package fuse

import "github.com/hanwen/go-fuse/v2/fs"

// Compile-time checks that Node implements every operation it is meant to.
var (
	_ = (fs.InodeEmbedder)((*Node)(nil))
	_ = (fs.NodeLookuper)((*Node)(nil))
	_ = (fs.NodeGetattrer)((*Node)(nil))
	_ = (fs.NodeSetattrer)((*Node)(nil))
	_ = (fs.NodeStatfser)((*Node)(nil))

	_ = (fs.NodeMkdirer)((*Node)(nil))
	_ = (fs.NodeMknoder)((*Node)(nil))
	_ = (fs.NodeSymlinker)((*Node)(nil))
	_ = (fs.NodeReadlinker)((*Node)(nil))
	_ = (fs.NodeLinker)((*Node)(nil))
	_ = (fs.NodeUnlinker)((*Node)(nil))
	_ = (fs.NodeRmdirer)((*Node)(nil))
	_ = (fs.NodeRenamer)((*Node)(nil))
	_ = (fs.NodeReaddirer)((*Node)(nil))
	_ = (fs.NodeOnForgetter)((*Node)(nil))

	_ = (fs.NodeCreater)((*Node)(nil))
	_ = (fs.NodeTmpfiler)((*Node)(nil))
	_ = (fs.NodeLookupNoder)((*Node)(nil))
	_ = (fs.NodeLookupParenter)((*Node)(nil))
	_ = (fs.NodeOpener)((*Node)(nil))
	_ = (fs.NodeReader)((*Node)(nil))
	_ = (fs.NodeWriter)((*Node)(nil))
	_ = (fs.NodeFlusher)((*Node)(nil))
	_ = (fs.NodeReleaser)((*Node)(nil))
	_ = (fs.NodeFsyncer)((*Node)(nil))
	_ = (fs.NodeAllocater)((*Node)(nil))
	_ = (fs.NodeLseeker)((*Node)(nil))
	_ = (fs.NodeCopyFileRanger)((*Node)(nil))

	_ = (fs.NodeGetxattrer)((*Node)(nil))
	_ = (fs.NodeSetxattrer)((*Node)(nil))
	_ = (fs.NodeListxattrer)((*Node)(nil))
	_ = (fs.NodeRemovexattrer)((*Node)(nil))

	_ = (fs.FileHandle)((*handle)(nil))
)
