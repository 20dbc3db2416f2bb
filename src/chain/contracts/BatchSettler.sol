// SPDX-License-Identifier: MIT
pragma solidity 0.8.30;

/// The EIP-3009 entry point BatchSettler calls: the `bytes signature` form of USDC v2.2 and TollgateUSD.
interface IERC3009 {
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature
    ) external;
}

/// @title BatchSettler
/// @notice Submits many EIP-3009 transfer authorizations for one token in one transaction. Each item runs
/// in its own try/catch, so an expired, replayed or underfunded authorization fails alone and the others
/// settle. Anyone may call: each signed authorization is its own permission, and the funds move from the
/// signer to the `to` it signed, never to the caller.
contract BatchSettler {
    struct Item {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
        bytes signature;
    }

    event Settled(address indexed token, address indexed from, bytes32 indexed nonce);
    event SettleFailed(address indexed token, address indexed from, bytes32 indexed nonce, bytes reason);

    error NotAContract(address token);

    function settle(address token, Item[] calldata items) external returns (bool[] memory ok) {
        // A call to an address without code would revert outside the try below and fail the whole batch.
        if (token.code.length == 0) revert NotAContract(token);
        ok = new bool[](items.length);
        for (uint256 i = 0; i < items.length; ++i) {
            Item calldata it = items[i];
            try IERC3009(token).transferWithAuthorization(
                it.from, it.to, it.value, it.validAfter, it.validBefore, it.nonce, it.signature
            ) {
                ok[i] = true;
                emit Settled(token, it.from, it.nonce);
            } catch (bytes memory reason) {
                emit SettleFailed(token, it.from, it.nonce, reason);
            }
        }
    }
}
