package client

// IdleLines is how many lines connections c keeps for its next calls.
func IdleLines(c *Client) int {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	return len(c.lines.idle)
}
