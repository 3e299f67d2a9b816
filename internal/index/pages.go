package index

import (
	"encoding/binary"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"
)

// bbolt's page layout (go.etcd.io/bbolt page.go): a 16-byte header (id,
// flags, the count of its entries, overflow pages) and, in a branch page,
// an entry of 16 bytes for each child (the key's position and size, the
// child's page id).
const (
	pageHeader  = 16
	branchEntry = 16
	branchFlag  = 0x01
	leafFlag    = 0x02
)

// CheckPages walks the branch pages of every bucket and says the index is
// damaged where a page is named twice, lies past the file's pages, or is
// not the kind its place wants. bbolt follows a page id as it finds it: a
// branch page that names itself or a page above it (a loop) makes its
// cursors descend for ever, growing memory until the process dies
// (etcd-io/bbolt#701). A page that a branch at the last level names is
// taken for the leaf it must be, unread: a branch page of the tree there is
// named twice, and its other naming finds it. The walk reads the branch
// pages alone, about one page in a hundred.
func (d *DB) CheckPages() error {
	return guard(func() error {
		return d.db.View(func(tx *bolt.Tx) error {
			size := int64(d.db.Info().PageSize)
			w := pageWalk{file: d.file, size: size, pages: uint64(tx.Size() / size)}
			w.seen = make([]uint64, w.pages/64+1)
			// The tree of the buckets themselves first: a lookup of a
			// bucket walks it.
			if err := w.tree(uint64(tx.Cursor().Bucket().Root())); err != nil {
				return fmt.Errorf("the index is damaged: its buckets: %w", err)
			}
			for _, name := range buckets {
				b := tx.Bucket(name)
				if b == nil {
					return ErrNoIndex
				}
				if root := uint64(b.Root()); root != 0 { // 0: an inline bucket, held in its parent's leaf
					if err := w.tree(root); err != nil {
						return fmt.Errorf("the index is damaged: bucket %s: %w", name, err)
					}
				}
			}
			return nil
		})
	})
}

type pageWalk struct {
	file  io.ReaderAt
	size  int64
	pages uint64   // the pages the file holds (the high-water mark)
	seen  []uint64 // a bit a page named so far
	buf   []byte
}

// name marks page id named, or says why it cannot be.
func (w *pageWalk) name(id uint64) error {
	if id < 2 || id >= w.pages { // 0 and 1 are the meta pages
		return fmt.Errorf("page %d is named, outside the %d pages the file holds", id, w.pages)
	}
	if w.seen[id/64]&(1<<(id%64)) != 0 {
		return fmt.Errorf("page %d is named twice", id)
	}
	w.seen[id/64] |= 1 << (id % 64)
	return nil
}

// read reads page id whole (with its overflow pages) and says its flags.
func (w *pageWalk) read(id uint64) ([]byte, uint16, error) {
	if int64(cap(w.buf)) < w.size {
		w.buf = make([]byte, w.size)
	}
	w.buf = w.buf[:w.size]
	if _, err := w.file.ReadAt(w.buf, int64(id)*w.size); err != nil {
		return nil, 0, err
	}
	if got := binary.LittleEndian.Uint64(w.buf); got != id {
		return nil, 0, fmt.Errorf("page %d says it is page %d", id, got)
	}
	if overflow := uint64(binary.LittleEndian.Uint32(w.buf[12:])); overflow > 0 {
		if id+overflow >= w.pages {
			return nil, 0, fmt.Errorf("page %d runs past the file's pages", id)
		}
		w.buf = append(w.buf, make([]byte, int64(overflow)*w.size)...)
		if _, err := w.file.ReadAt(w.buf[w.size:], int64(id+1)*w.size); err != nil {
			return nil, 0, err
		}
	}
	return w.buf, binary.LittleEndian.Uint16(w.buf[8:]), nil
}

// tree walks the branch pages of the tree whose root is page root.
func (w *pageWalk) tree(root uint64) error {
	if err := w.name(root); err != nil {
		return err
	}
	branches := []uint64{root}
	for len(branches) > 0 {
		id := branches[len(branches)-1]
		branches = branches[:len(branches)-1]
		page, flags, err := w.read(id)
		switch {
		case err != nil:
			return err
		case flags == leafFlag && id == root:
			continue
		case flags != branchFlag:
			return fmt.Errorf("page %d, named as a branch page, has flags %#x", id, flags)
		}
		count := int(binary.LittleEndian.Uint16(page[10:]))
		if count == 0 || pageHeader+count*branchEntry > len(page) {
			return fmt.Errorf("branch page %d holds %d entries", id, count)
		}
		children := make([]uint64, count)
		for i := range children {
			children[i] = binary.LittleEndian.Uint64(page[pageHeader+i*branchEntry+8:])
			if err := w.name(children[i]); err != nil {
				return fmt.Errorf("branch page %d: %w", id, err)
			}
		}
		// Every leaf is at one depth: the first child says whether this
		// page's children are branch pages or the leaves.
		var header [pageHeader]byte
		if _, err := w.file.ReadAt(header[:], int64(children[0])*w.size); err != nil {
			return err
		}
		if binary.LittleEndian.Uint16(header[8:]) == branchFlag {
			branches = append(branches, children...)
		}
	}
	return nil
}
