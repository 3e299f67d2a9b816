package wal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// ReadBodies reads the frames of r from offset on, which must be where a
// frame starts, handing each one's body to each until it returns false or
// the file ends. It reads a few frames of a long file, as a payload kept out
// of memory needs, so it checks their form but not the checksum chain
// (each frame's seed is the frame before's checksum): the caller checks what
// it takes from them.
func ReadBodies(r io.ReaderAt, offset int64, each func(body []byte) bool) error {
	br := bufio.NewReaderSize(io.NewSectionReader(r, offset, 1<<62), 64<<10)
	for at := offset; ; {
		line, err := readLine(br)
		switch {
		case errors.Is(err, io.EOF) && len(line) == 0:
			return nil
		case err != nil:
			return fmt.Errorf("reading the frame at offset %d: %w", at, err)
		case len(line) < crcHexLen+2 || line[crcHexLen] != ' ' || !isHex8(line[:crcHexLen]):
			return fmt.Errorf("there is no frame at offset %d", at)
		}
		if !each(line[crcHexLen+1:]) {
			return nil
		}
		at += int64(len(line)) + 1
	}
}

// readLine reads one line of up to maxLine bytes, without its newline.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case len(line) >= maxLine:
			return nil, fmt.Errorf("a frame longer than the limit of %d bytes", maxLine)
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}
